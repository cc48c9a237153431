"""What agents report about workers, applied to pods, and each job's status brought in line
with its workers (docs/statuses.md, docs/traps.md).

Pod writes are compare-and-set on the pod's status (only a live pod can change), so a
duplicated or late report is harmless; job writes go through `transitions.transition`, or
`transitions.finish_many` for a heartbeat's plain completions. The rule itself is pure
(`policy.derive`).

Lock order: a job's row before its pods' rows, everywhere (`lock_jobs`). The scheduler's
preemption and a user's stop lock the job and then stop its pods; a worker's report used to
lock its pod and then the job (to reconcile it): two such transactions deadlocked.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Case, F, Q, QuerySet, Value, When
from django.utils import timezone

from jobs.actions import bulk
from jobs.actions import restarts as restart
from jobs.actions.results import completion
from jobs.actions.stop import stop_pods
from jobs.actions.transitions import Finish, TransitionConflict, finish_many, transition
from jobs.models import Job, Pod, PodDesired, RestartRecord, WorkerGpuSample
from policy.derive import (
    JobChange,
    PodView,
    derive_job_transitions,
    final_pod_status,
    pod_status_from_exit,
)
from policy.faulttolerance.hang import deadline_after
from policy.faulttolerance.policy import config_of
from policy.statuses import ACTIVE_POD_STATUSES, Actor, JobStatus, PodStatus
from protocol import limits
from protocol.agent import AGENT_SHUTDOWN
from protocol.text import fit, fit_tail, last_line


@dataclass(frozen=True)
class WorkerChange:
    """What an agent saw of one worker (apply_worker_state's arguments)."""

    pod: Pod
    running: bool
    exit_code: int | None = None
    error: str = ""
    container_id: str = ""
    logs_delivered: bool = False
    ended_by: str = ""  # protocol.agent.WorkerReport.ended_by ("" when not said)


def apply_worker_state(
    pod: Pod,
    *,
    running: bool,
    exit_code: int | None = None,
    error: str = "",
    container_id: str = "",
    logs_delivered: bool = False,
    now: datetime | None = None,
) -> bool:
    """Record what an agent saw of one worker. Returns whether the pod changed.

    `running=True` moves Starting/Unknown → Running; `running=False` ends the pod with
    `final_pod_status`. Both are compare-and-set on a live status, so a re-sent report of an
    already final worker changes nothing.
    """
    change = WorkerChange(pod, running, exit_code, error, container_id, logs_delivered)
    return pod.pk in apply_worker_states([change], now=now)


def apply_worker_states(changes: list[WorkerChange], *, now: datetime | None = None) -> set[int]:
    """Several workers' changes (of one heartbeat) in ONE transaction: their jobs locked
    at once (id order), the pods compare-and-set as in apply_worker_state (one UPDATE for
    the starts, one for the exits), then each job whose pods changed reconciled once, from
    jobs and pods read in two queries, the plain completions moved together. Returns the
    ids of the pods that changed. Raises on any failure, with nothing written: the caller
    then applies the changes one by one, to refuse only the bad one."""
    now = now or timezone.now()
    with transaction.atomic():
        # The jobs are read as they are locked (one statement): they change only under
        # their lock, so these rows are current when the pods' changes are reconciled.
        locked = lock_jobs(c.pod.job_id for c in changes)
        # One change per pod, the first (a heartbeat names each pod once: protocol.batches).
        firsts: dict[int, WorkerChange] = {}
        for change in changes:
            firsts.setdefault(change.pod.pk, change)
        changes = list(firsts.values())
        written = _write_pods(changes, now)
        changed = [c for c in changes if c.pod.pk in written]
        for c in changed:
            if c.running and c.pod.attempt > 1:
                _async_restart_ran(c.pod, now)
        if changed:
            jobs = {c.pod.job_id: locked[c.pod.job_id] for c in changed}
            pods = _current_pods_of(jobs)
            finishing: list[Finish] = []  # the plain completions, written together
            for job_id in sorted(jobs):
                reconcile_job(
                    job_id, now=now, job=jobs[job_id], pods=pods[job_id], finishing=finishing
                )
            finish_many(finishing, actor=Actor.AGENT, now=now)
    return {c.pod.pk for c in changed}


# The pods' compare-and-set UPDATEs of a heartbeat's changes, one per kind: each value of a
# row of the row source (jobs.actions.bulk), with its SQL type.
_START_RECORD = (("pod_id", "bigint"), ("container_id", "text"))
_EXIT_RECORD = (
    ("pod_id", "bigint"),
    ("status", "text"),
    ("exit_code", "integer"),
    ("error", "text"),
    ("reason", "text"),
    ("container_id", "text"),
    ("ended_by", "text"),
    ("logs_delivered", "boolean"),
)


def _write_pods(changes: list[WorkerChange], now: datetime) -> set[int]:
    """The pods' compare-and-set on a live status (the caller holds their jobs' locks): the
    starts in one UPDATE, the exits in another, each joined on a row source and returning
    the pods it changed. One statement per pod was a third of a heartbeat's exits
    (bench/percall.py). Returns the ids of the pods that changed."""
    starts, exits = [], []
    for change in changes:
        if change.running:
            starts.append((change.pod.pk, change.container_id))
        else:
            exits.append(_exit_row(change))
    table, column = connection.ops.quote_name(Pod._meta.db_table), bulk.columns(Pod)
    stamp = connection.ops.adapt_datetimefield_value(now)
    changed: set[int] = set()
    container = f"COALESCE(NULLIF(v.container_id, ''), {table}.{column['container_id']})"
    for source, params in bulk.row_sources(_START_RECORD, starts) if starts else ():
        live = [PodStatus.STARTING.value, PodStatus.UNKNOWN.value]
        changed.update(
            row[0]
            for row in bulk.fetch(
                f"UPDATE {table} SET {column['status']} = %s, "  # noqa: S608
                f"{column['started_at']} = COALESCE({table}.{column['started_at']}, %s), "
                f"{column['container_id']} = {container}, {column['last_report_at']} = %s, "
                f"{column['status_reason']} = '' FROM {source} "
                f"WHERE {table}.{column['id']} = v.pod_id "
                f"AND {table}.{column['status']} IN (%s, %s) RETURNING {table}.{column['id']}",
                [PodStatus.RUNNING.value, stamp, stamp, *params, *live],
            )
        )
    for source, params in bulk.row_sources(_EXIT_RECORD, exits) if exits else ():
        live = [status.value for status in sorted(ACTIVE_POD_STATUSES)]
        delivered = f"{table}.{column['logs_delivered']}"
        changed.update(
            row[0]
            for row in bulk.fetch(
                f"UPDATE {table} SET {column['status']} = v.status, "  # noqa: S608
                f"{column['exit_code']} = v.exit_code, {column['error_message']} = v.error, "
                f"{column['status_reason']} = v.reason, {column['container_id']} = {container}, "
                f"{column['finished_at']} = %s, {column['last_report_at']} = %s, "
                f"{column['ended_by']} = v.ended_by, "
                # Never taken back: the agent's end of stream may have come first.
                f"{column['logs_delivered']} = ({delivered} OR v.logs_delivered) "
                f"FROM {source} WHERE {table}.{column['id']} = v.pod_id "
                f"AND {table}.{column['status']} IN ({', '.join(['%s'] * len(live))}) "
                f"RETURNING {table}.{column['id']}",
                [stamp, stamp, *params, *live],
            )
        )
    return changed


def _exit_row(change: WorkerChange) -> tuple:
    """An exit's values for its pod (_EXIT_RECORD after the id): the final status the stop
    order or the exit code gives, and why."""
    pod = change.pod
    final = final_pod_status(
        pod.stop_as if pod.desired == PodDesired.STOP else "", change.exit_code
    )
    reason = pod.stop_reason if final != pod_status_from_exit(change.exit_code) else ""
    if change.ended_by == AGENT_SHUTDOWN and pod.desired == PodDesired.RUN:
        # Its node left (the agent shut down): lost to the platform, not failed by the job
        # (docs/fault-tolerance.md, "A node leaving").
        final, reason = PodStatus.LOST, NODE_LEFT
    return (
        pod.pk,
        final,
        change.exit_code,
        fit_tail(change.error, limits.ERROR_STORED),
        reason or last_line(change.error),
        change.container_id,
        change.ended_by,
        change.logs_delivered,
    )


def lock_jobs(job_ids: Iterable[int]) -> dict[int, Job]:
    """Lock these jobs' rows, in id order, before any of their pods (the module's lock
    order), and return them by id. The lock is a no-op outside PostgreSQL (SQLite
    serialises writers)."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    return {
        job.pk: job for job in Job.objects.select_for_update().filter(pk__in=ids).order_by("pk")
    }


def _async_restart_ran(pod: Pod, now: datetime) -> None:
    """An Asynchronous restart's new worker runs: its restart record is complete."""
    RestartRecord.objects.filter(
        job_id=pod.job_id, to_attempt=pod.attempt, whole_job=False, running_at__isnull=True
    ).update(running_at=now)


def current_pods(job: Job) -> list[Pod]:
    """The job's current copy of each worker: per rank, its newest pod of an attempt up to
    the job's. (Asynchronous restarts replace one rank at a time, so ranks may differ.)"""
    return _current_pods_of({job.pk: job})[job.pk]


def _current_pods_of(jobs: dict[int, Job]) -> dict[int, list[Pod]]:
    """current_pods of several jobs, in one query."""
    newest: dict[int, dict[int, Pod]] = {job_id: {} for job_id in jobs}
    for pod in Pod.objects.filter(job_id__in=list(jobs)).select_related("node"):
        if pod.attempt > jobs[pod.job_id].attempt:
            continue
        ranks = newest[pod.job_id]
        if pod.rank not in ranks or pod.attempt > ranks[pod.rank].attempt:
            ranks[pod.rank] = pod
    return {job_id: [ranks[r] for r in sorted(ranks)] for job_id, ranks in newest.items()}


def reconcile_job(
    job_id: int,
    *,
    now: datetime | None = None,
    job: Job | None = None,
    pods: list[Pod] | None = None,
    finishing: list[Finish] | None = None,
) -> list[JobChange]:
    """Bring the job status in line with its current workers (idempotent).

    A failure or a lost worker of a job with Automatic Fault Tolerance is handed to
    `actions.restarts` instead of ending the job Failed; a job that just became
    Preempted is restarted there too. `job` and `pods` (its current_pods): already read
    in this transaction, under the job's lock. `finishing`: a final move to Completed, the
    last change, is added there for the caller's `finish_many` instead of written here
    (nothing follows it in this function)."""
    now = now or timezone.now()
    job = job if job is not None else Job.objects.get(pk=job_id)
    pods = pods if pods is not None else current_pods(job)
    changes = _derived_changes(job, pods)
    applied: list[JobChange] = []
    for index, change in enumerate(changes):
        if change.to_status == JobStatus.FAILED and job.stop_requested_at is None:
            failed = [p for p in pods if p.status in (PodStatus.FAILED, PodStatus.LOST)]
            # A node that left is the platform's doing: it speaks for the attempt first.
            failed.sort(key=lambda p: p.ended_by != AGENT_SHUTDOWN)
            if failed:
                try:
                    with transaction.atomic():
                        outcome = restart.handle_failure(job, failed[0], now=now)
                except TransitionConflict:
                    break
                if outcome is not None:
                    if outcome.to_status is not None:
                        applied.append(JobChange(outcome.to_status, outcome.reason))
                    break
        if change.to_status == JobStatus.COMPLETED:
            # Exit 0 is not yet "done": the result's contract decides (docs/results.md).
            change = completion(job, change, now)
            last = index == len(changes) - 1
            if finishing is not None and last and change.to_status == JobStatus.COMPLETED:
                finishing.append(Finish(job, change.to_status, change.reason, change.exit_code))
                applied.append(change)
                break
        fields = {}
        if change.exit_code is not None:
            fields["exit_code"] = change.exit_code
        if change.to_status == JobStatus.RUNNING:
            fields["hang_deadline"] = _first_hang_deadline(job, now)
        try:
            transition(
                job, change.to_status, reason=change.reason, actor=Actor.AGENT, now=now, **fields
            )
        except TransitionConflict:
            break  # someone else moved the job; the next report re-derives
        applied.append(change)
        if change.to_status == JobStatus.RUNNING and job.attempt > 1:
            restart.mark_running(job.pk, job.attempt, now)
        if change.to_status == JobStatus.FAILED:
            # The rest of the gang is useless without the failed worker: stop it.
            stop_pods(
                job_id, reason=f"job failed: {change.reason}", stop_as=PodStatus.STOPPED, now=now
            )
        if change.to_status == JobStatus.PREEMPTED:
            try:
                with transaction.atomic():
                    outcome = restart.handle_preempted(job, now=now)
            except TransitionConflict:
                break
            if outcome is not None:
                applied.append(JobChange(JobStatus.PENDING, outcome.reason))
    return applied


def _derived_changes(job: Job, pods: list[Pod]) -> list[JobChange]:
    """The job's moves its workers call for (`policy.derive`, pure)."""
    views = [
        PodView(
            p.rank,
            PodStatus(p.status),
            p.exit_code,
            p.status_reason or last_line(p.error_message),
        )
        for p in pods
    ]
    return derive_job_transitions(
        JobStatus(job.status),
        views,
        stop_requested=job.stop_requested_at is not None,
        stop_final_status=JobStatus(job.stop_final_status or JobStatus.STOPPED),
        stop_reason=job.stop_reason,
    )


def _first_hang_deadline(job: Job, now: datetime) -> datetime | None:
    """The hang clock starts when the attempt runs (only with hang detection on)."""
    config = config_of(job)
    return deadline_after(now, config.hang_timeout) if config.hang_detection else None


def note_refusal(pod: Pod, reason: str, now: datetime) -> None:
    """The console refused (or repaired) something an agent sent about this worker: keep
    the newest reason on the pod, written only when it changes."""
    reason = fit(reason, limits.REASON)
    if pod.report_refused != reason:
        Pod.objects.filter(pk=pod.pk).update(report_refused=reason, report_refused_at=now)
        pod.report_refused, pod.report_refused_at = reason, now


def record_gpu_samples(samples: Iterable[tuple[int, dict]], at: datetime) -> None:
    """Running workers' GPU use (pod id, protocol.agent.GpuUsage fields), one insert."""
    rows = [WorkerGpuSample(pod_id=pod_id, at=at, **usage) for pod_id, usage in samples]
    if rows:
        WorkerGpuSample.objects.bulk_create(rows)


# -- dead and unreachable nodes (agents.node_monitor) -------------------------------------

NODE_LOST = "node lost"
NODE_LEFT = "its node left: the node's agent shut down"


def mark_pods_unknown(node_id: int, reason: str) -> int:
    """The node stopped answering: its placed workers are Unknown (not dead) until it
    answers again or is declared lost."""
    return Pod.objects.filter(
        node_id=node_id, status__in=[PodStatus.STARTING, PodStatus.RUNNING]
    ).update(status=PodStatus.UNKNOWN, status_reason=reason)


def end_pods_of_dead_nodes(pods: QuerySet[Pod], now: datetime, *, reason: str = NODE_LOST) -> int:
    """End live pods of dead nodes and reconcile their jobs, in the caller's transaction.

    Ordered stops end as ordered (a stop never hangs on a dead node, and a user's stop still
    ends the job Stopped); the rest end Lost. Reconciling in the same transaction keeps this
    level-triggered: if it fails, nothing is committed and the next cycle tries again."""
    rows = list(pods.filter(status__in=list(ACTIVE_POD_STATUSES)).values_list("id", "job_id"))
    if not rows:
        return 0
    jobs = lock_jobs(job_id for _, job_id in rows)
    ordered_stop = Q(desired=PodDesired.STOP) & ~Q(stop_as="")
    ended = Pod.objects.filter(
        pk__in=[pk for pk, _ in rows], status__in=list(ACTIVE_POD_STATUSES)
    ).update(
        status=Case(When(ordered_stop, then=F("stop_as")), default=Value(PodStatus.LOST)),
        status_reason=Case(When(ordered_stop, then=F("stop_reason")), default=Value(reason)),
        finished_at=now,
    )
    for job_id in sorted(jobs):  # as read under their lock: the pods' update leaves them
        reconcile_job(job_id, now=now, job=jobs[job_id])
    return ended


def requeue_refused_pod(pod: Pod, reason: str, now: datetime) -> bool:
    """The node refused to start this worker (Kubernetes' kubelet admission: `OutOf…`): the
    worker never ran, so its job is placed again as a new attempt (Pending), spending no
    restart budget; the rest of the attempt is stopped. Returns whether anything changed."""
    with transaction.atomic():
        job = lock_jobs([pod.job_id])[pod.job_id]
        ended = Pod.objects.filter(pk=pod.pk, status__in=list(ACTIVE_POD_STATUSES)).update(
            status=PodStatus.FAILED,
            status_reason=fit(reason, limits.REASON),
            error_message=fit_tail(reason, limits.ERROR_STORED),
            finished_at=now,
            last_report_at=now,
            logs_delivered=True,
        )
        if not ended:
            return False
        placed = job.status in (JobStatus.STARTING, JobStatus.RUNNING)
        if not placed or job.attempt != pod.attempt or job.stop_requested_at is not None:
            reconcile_job(job.pk, now=now)
            return True
        try:
            transition(
                job,
                JobStatus.PENDING,
                reason=f"requeued: worker {pod.rank} {reason}",
                actor=Actor.AGENT,
                now=now,
                attempt=job.attempt + 1,
                hang_deadline=None,
            )
        except TransitionConflict:
            return True
        stop_pods(job, reason=f"requeued: {reason}", stop_as=PodStatus.STOPPED, now=now)
    return True
