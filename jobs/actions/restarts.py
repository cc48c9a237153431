"""Automatic Fault Tolerance: apply `policy.decide()` to a job whose workers failed, were
preempted, hung or were lost (docs/statuses.md, docs/fault-tolerance.md). A new attempt of the same
job is `start_new_attempt` (a finished job submitted again is `actions.submit.resubmit_job`).

Called from `actions.workers.reconcile_job` (worker exits, lost nodes, preemption) and from
`jobs.job_monitor` (hangs), always inside the caller's transaction. Job writes go through
`transitions.transition` (compare-and-set on the status); a conflict means another writer moved
the job first and nothing here is applied (the transaction rolls back with it).

- Synchronous restart: the job goes Running/Starting → Pending (Preempted → Pending) as a new
  attempt; the old attempt's remaining workers are ordered to stop, and the scheduler creates
  the new attempt's workers only once every old one is final (it already waits for them).
- Asynchronous restart: only the failed worker gets a new pod, on the same node and GPUs (they
  were freed in this same transaction, so no scheduler snapshot ever saw them free); the job
  keeps its status and its attempt number moves on (the attempt is the fencing epoch).
- Retry elsewhere (an ECC/Xid failure, `Decision.exclude_node`): the failed worker's node is
  added to `Job.excluded_nodes`, which the scheduler never places the job on again. Since an
  Asynchronous replacement would reuse that very node, such a failure restarts the whole job
  (the Synchronous path) so that the scheduler places it elsewhere.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from jobs.actions.stop import request_stop, stop_pods
from jobs.actions.transitions import record_decision, transition
from jobs.hooks import Notice, announce_one
from jobs.models import Checkpoint, Job, Pod, RestartKind, RestartRecord
from policy.faulttolerance.policy import (
    Action,
    Counters,
    Decision,
    Failure,
    FailureKind,
    FtConfig,
    config_of,
)
from policy.faulttolerance.policy import decide as decide_policy
from policy.statuses import Actor, JobStatus, PodStatus
from protocol.agent import AGENT_SHUTDOWN, NODE_REFUSED, RESUME_REFUSED

TAIL_CHARS = 600  # log tail quoted in a final Failed reason

_KIND = {
    FailureKind.EXIT: RestartKind.FAILURE,
    FailureKind.HANG: RestartKind.HANG,
    FailureKind.PREEMPTED: RestartKind.PREEMPTION,
    FailureKind.NODE_LOST: RestartKind.NODE_LOST,
    FailureKind.NODE_LEFT: RestartKind.NODE_LOST,  # counted with lost nodes
    FailureKind.NODE_REFUSED: RestartKind.NODE_REFUSED,  # not counted: tried elsewhere
}
NODE_LOSSES = (FailureKind.NODE_LOST, FailureKind.NODE_LEFT)


@dataclass(frozen=True)
class Outcome:
    action: Action
    reason: str
    to_status: JobStatus | None = None


def counters_of(job: Job) -> Counters:
    return Counters(
        failure_restarts=job.restart_count,
        preemptions=job.preemption_count,
        node_losses=job.node_loss_count,
    )


def failure_of(pod: Pod) -> Failure:
    """The failure a final worker stands for (pod status Failed or Lost)."""
    if pod.status == PodStatus.LOST:
        kind = FailureKind.NODE_LEFT if pod.ended_by == AGENT_SHUTDOWN else FailureKind.NODE_LOST
        return Failure(kind, worker_rank=pod.rank, message=pod.status_reason)
    message = pod.error_message or pod.status_reason
    if pod.ended_by == NODE_REFUSED:  # never started: its node lacked what the job needs
        return Failure(FailureKind.NODE_REFUSED, pod.rank, None, message)
    if pod.ended_by == RESUME_REFUSED:  # never started: the run it would resume changed
        return Failure(FailureKind.RESUME_REFUSED, pod.rank, None, message)
    return Failure(FailureKind.EXIT, pod.rank, pod.exit_code, message)


def _newest_checkpoint(job: Job) -> str:
    row = (
        Checkpoint.objects.filter(job=job, committed=True, pruned_at__isnull=True)
        .order_by("-step", "-id")
        .values_list("path", flat=True)
        .first()
    )
    return row or ""


def _record(
    job: Job,
    *,
    from_attempt: int,
    failure: Failure,
    decision: Decision,
    config: FtConfig,
    used: int,
    pod: Pod | None,
    whole_job: bool,
    now: datetime,
) -> RestartRecord:
    return RestartRecord.objects.create(
        job=job,
        from_attempt=from_attempt,
        to_attempt=job.attempt,
        created_at=now,
        kind=_KIND[failure.kind],
        worker_rank=failure.worker_rank,
        node_name=pod.node.name if pod is not None and pod.node_id else "",
        exit_code=failure.exit_code,
        error_excerpt=failure.message.strip()[-TAIL_CHARS:],
        rule=decision.rule,
        reason=decision.reason,
        whole_job=whole_job,
        restarts_used=used,
        restarts_max=config.max_restarts,
        backoff_seconds=decision.backoff_seconds,
    )


def _excluding(job: Job, decision: Decision, pod: Pod | None) -> list[dict] | None:
    """The job's excluded nodes with the failed worker's node added, or None: no change."""
    if not decision.exclude_node or pod is None or pod.node_id is None:
        return None
    current = list(job.excluded_nodes or [])
    if any(entry.get("id") == pod.node_id for entry in current):
        return None
    return [*current, {"id": pod.node_id, "name": pod.node.name, "rule": decision.rule}]


def start_new_attempt(
    job: Job,
    *,
    failure: Failure,
    decision: Decision,
    config: FtConfig,
    pod: Pod | None,
    actor: Actor,
    now: datetime,
) -> None:
    """A new attempt of every worker: the job goes back to Pending (Synchronous)."""
    from_attempt = job.attempt
    fields = {
        "attempt": job.attempt + 1,
        "restart_count": job.restart_count + int(decision.consumes_budget),
        "preemption_count": job.preemption_count + int(failure.kind == FailureKind.PREEMPTED),
        "node_loss_count": job.node_loss_count + int(failure.kind in NODE_LOSSES),
        "restart_not_before": (
            now + timedelta(seconds=decision.backoff_seconds) if decision.backoff_seconds else None
        ),
        # Its own newest, else where it started from (a Restart of another job).
        "resume_from": _newest_checkpoint(job) or job.resume_from,
        "hang_deadline": None,
        "stop_requested_at": None,
        "stop_reason": "",
        "stop_final_status": "",
    }
    if failure.exit_code is not None:
        fields["exit_code"] = failure.exit_code
    reason = decision.reason
    if decision.backoff_seconds:
        reason += f" (backing off {decision.backoff_seconds:g}s)"
    excluded = _excluding(job, decision, pod)
    if excluded is not None:
        fields["excluded_nodes"] = excluded
        reason += f"; node {excluded[-1]['name']} excluded for this job"
    transition(job, JobStatus.PENDING, reason=reason, actor=actor, now=now, **fields)
    stop_pods(
        job,
        reason=f"restarting as attempt {job.attempt}: {decision.reason}",
        stop_as=PodStatus.STOPPED,
        now=now,
    )
    _record(
        job,
        from_attempt=from_attempt,
        failure=failure,
        decision=decision,
        config=config,
        used=job.restart_count,
        pod=pod,
        whole_job=True,
        now=now,
    )
    _announce_restart(job, failure, reason, actor, from_attempt, whole_job=True, now=now)


def restart_worker(
    job: Job, pod: Pod, *, failure: Failure, decision: Decision, config: FtConfig, now: datetime
) -> bool:
    """Asynchronous: a new pod for the failed worker only, in the slot it freed. Returns
    False when another writer changed the job first (nothing done)."""
    from_attempt = job.attempt
    new_attempt = job.attempt + 1
    resume = _newest_checkpoint(job) or job.resume_from
    claimed = Job.objects.filter(pk=job.pk, status=job.status, attempt=from_attempt).update(
        attempt=new_attempt,
        restart_count=job.restart_count + 1,
        resume_from=resume,
        status_reason=decision.reason,
        updated_at=now,
    )
    if not claimed:
        return False
    job.attempt, job.restart_count, job.resume_from = new_attempt, job.restart_count + 1, resume
    job.status_reason = decision.reason
    Pod.objects.create(
        job=job,
        attempt=new_attempt,
        rank=pod.rank,
        node_id=pod.node_id,
        gpu_indices=list(pod.gpu_indices or []),
        gpu_uuids=list(pod.gpu_uuids or []),
        gpus=pod.gpus,
        cpus=pod.cpus,
        memory_gb=pod.memory_gb,
        charged_quota_id=pod.charged_quota_id,
        in_quota=pod.in_quota,
        status=PodStatus.STARTING,
    )
    record_decision(job, f"worker {pod.rank} restarted: {decision.reason}", actor=Actor.AGENT)
    _record(
        job,
        from_attempt=from_attempt,
        failure=failure,
        decision=decision,
        config=config,
        used=job.restart_count,
        pod=pod,
        whole_job=False,
        now=now,
    )
    _announce_restart(
        job, failure, decision.reason, Actor.AGENT, from_attempt, whole_job=False, now=now
    )
    return True


def _announce_restart(
    job: Job,
    failure: Failure,
    reason: str,
    actor: Actor,
    from_attempt: int,
    *,
    whole_job: bool,
    now: datetime,
) -> None:
    announce_one(
        Notice.RESTARTED,
        job,
        now,
        reason=reason,
        actor=actor,
        attempt=job.attempt,
        detail={
            "kind": str(_KIND[failure.kind]),
            "from_attempt": from_attempt,
            "to_attempt": job.attempt,
            "whole_job": whole_job,
            "worker_rank": failure.worker_rank,
        },
    )


def handle_failure(job: Job, pod: Pod, *, now: datetime | None = None) -> Outcome | None:
    """A worker of a running job failed or was lost. Returns what was done, or None when
    Automatic Fault Tolerance is off (the caller ends the job Failed as before); a node
    that left (its agent shut down) stops such a job instead: the system's doing."""
    config = config_of(job)
    failure = failure_of(pod)
    if not config.enabled and failure.kind != FailureKind.NODE_LEFT:
        return None
    now = now or timezone.now()
    decision = decide_policy(config, counters_of(job), failure)
    if decision.action == Action.STOP:
        transition(job, JobStatus.STOPPED, reason=decision.reason, actor=Actor.SYSTEM, now=now)
        stop_pods(job, reason=decision.reason, stop_as=PodStatus.STOPPED, now=now)
        return Outcome(Action.STOP, decision.reason, JobStatus.STOPPED)
    # Asynchronous with retry elsewhere: the replacement pod would reuse the failed node and
    # GPUs, so the whole job restarts instead (below) and the scheduler places it elsewhere.
    if decision.action == Action.RESTART_WORKER and not decision.exclude_node:
        if restart_worker(job, pod, failure=failure, decision=decision, config=config, now=now):
            return Outcome(decision.action, decision.reason)
        return None
    if decision.action in (Action.RESTART_JOB, Action.RESTART_WORKER):
        start_new_attempt(
            job,
            failure=failure,
            decision=decision,
            config=config,
            pod=pod,
            actor=Actor.AGENT,
            now=now,
        )
        return Outcome(Action.RESTART_JOB, decision.reason, JobStatus.PENDING)
    reason = decision.reason
    tail = failure.message.strip()[-TAIL_CHARS:]
    if tail:
        reason += f"\nlast log lines:\n{tail}"
    fields = {"exit_code": failure.exit_code} if failure.exit_code is not None else {}
    transition(job, JobStatus.FAILED, reason=reason, actor=Actor.AGENT, now=now, **fields)
    stop_pods(job, reason=f"job failed: {decision.reason}", stop_as=PodStatus.STOPPED, now=now)
    return Outcome(Action.FAIL, reason, JobStatus.FAILED)


def handle_preempted(job: Job, *, now: datetime | None = None) -> Outcome | None:
    """The job just became Preempted: with Automatic Fault Tolerance, a new attempt."""
    config = config_of(job)
    if not config.enabled:
        return None
    now = now or timezone.now()
    failure = Failure(FailureKind.PREEMPTED, message=job.status_reason)
    decision = decide_policy(config, counters_of(job), failure)
    if decision.action != Action.RESTART_JOB:
        return None
    start_new_attempt(
        job,
        failure=failure,
        decision=decision,
        config=config,
        pod=None,
        actor=Actor.SCHEDULER,
        now=now,
    )
    return Outcome(Action.RESTART_JOB, decision.reason, JobStatus.PENDING)


def handle_hang(job: Job, evidence: str, *, now: datetime | None = None) -> Outcome:
    """The monitor found the job hung: restart it (within the budget), stop it, or fail it."""
    now = now or timezone.now()
    config = config_of(job)
    failure = Failure(FailureKind.HANG, message=evidence)
    decision = decide_policy(config, counters_of(job), failure)
    reason = f"{decision.reason}: {evidence}"
    announce_one(Notice.HANG_DETECTED, job, now, reason=evidence, actor=Actor.MONITOR)
    if decision.action == Action.STOP:
        request_stop(job, actor=Actor.MONITOR, reason=reason)
        return Outcome(Action.STOP, reason, JobStatus.STOPPED)
    if decision.action in (Action.RESTART_JOB, Action.RESTART_WORKER):
        decision = Decision(
            Action.RESTART_JOB,
            reason,
            rule=decision.rule,
            consumes_budget=decision.consumes_budget,
            backoff_seconds=decision.backoff_seconds,
        )
        start_new_attempt(
            job,
            failure=failure,
            decision=decision,
            config=config,
            pod=None,
            actor=Actor.MONITOR,
            now=now,
        )
        return Outcome(Action.RESTART_JOB, reason, JobStatus.PENDING)
    # Out of budget (or fault tolerance off): a hung job holds GPUs for nothing. It ends
    # Failed now; its workers are stopped and keep their GPUs until they have exited.
    transition(job, JobStatus.FAILED, reason=reason, actor=Actor.MONITOR, now=now)
    stop_pods(job, reason=f"job failed: {reason}", stop_as=PodStatus.STOPPED, now=now)
    return Outcome(Action.FAIL, reason, JobStatus.FAILED)


def mark_running(job_id: int, attempt: int, now: datetime) -> int:
    """The restart into `attempt` is complete: its workers run. Fills the duration."""
    return RestartRecord.objects.filter(
        job_id=job_id, to_attempt=attempt, running_at__isnull=True
    ).update(running_at=now)
