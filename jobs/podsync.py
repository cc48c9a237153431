"""Worker (pod) reports from agents, and the job status derived from its workers.

The job status follows its workers' real states (DESIGN §9, "status that lies"):
`derive_job_transitions` is the pure rule; `apply_worker_state` and `reconcile_job` are the
shell. Pod writes are compare-and-set on the pod's status (only a live pod can change), so a
duplicated or late report is harmless; job writes go through `lifecycle.transition`.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from jobs.lifecycle import TransitionConflict, transition
from jobs.models import Job, Pod, PodDesired
from jobs.statuses import (
    ACTIVE_POD_STATUSES,
    FINAL_POD_STATUSES,
    Actor,
    JobStatus,
    PodStatus,
)


@dataclass(frozen=True)
class PodView:
    rank: int
    status: PodStatus
    exit_code: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class JobChange:
    to_status: JobStatus
    reason: str
    exit_code: int | None = None


def _describe_exit(pod: PodView) -> str:
    text = f"worker {pod.rank} exited {pod.exit_code}"
    if pod.exit_code is None:
        text = f"worker {pod.rank} failed"
    return f"{text}: {pod.reason}" if pod.reason else text


def derive_job_transitions(
    status: JobStatus,
    pods: Sequence[PodView],
    *,
    stop_requested: bool = False,
    stop_final_status: JobStatus = JobStatus.STOPPED,
    stop_reason: str = "",
) -> list[JobChange]:
    """The job transitions implied by the workers of its current attempt (pure)."""
    if status not in (JobStatus.STARTING, JobStatus.RUNNING) or not pods:
        return []
    statuses = [p.status for p in pods]
    all_final = all(s in FINAL_POD_STATUSES for s in statuses)
    if stop_requested:
        if all_final:
            return [JobChange(stop_final_status, stop_reason or "stopped")]
        return []
    changes: list[JobChange] = []
    failed = [p for p in pods if p.status in (PodStatus.FAILED, PodStatus.LOST)]
    if failed:
        first = min(failed, key=lambda p: p.rank)
        reason = (
            f"worker {first.rank} lost: {first.reason or 'node lost'}"
            if first.status == PodStatus.LOST
            else _describe_exit(first)
        )
        return [JobChange(JobStatus.FAILED, reason, first.exit_code)]
    ran = {PodStatus.RUNNING, PodStatus.SUCCEEDED}
    if status == JobStatus.STARTING and all(s in ran for s in statuses):
        changes.append(JobChange(JobStatus.RUNNING, "all workers running"))
    if all(s == PodStatus.SUCCEEDED for s in statuses):
        changes.append(JobChange(JobStatus.COMPLETED, "all workers exited 0", 0))
    elif any(s in (PodStatus.STOPPED, PodStatus.TERMINATED) for s in statuses):
        # A worker stopped without a job-level stop (e.g. killed on the node by an operator).
        stopped = next(p for p in pods if p.status in (PodStatus.STOPPED, PodStatus.TERMINATED))
        changes.append(JobChange(JobStatus.FAILED, _describe_exit(stopped), stopped.exit_code))
    return changes


def final_pod_status(pod: Pod, exit_code: int | None) -> PodStatus:
    """How an exited worker ends: as ordered when the console stopped it, else by its code."""
    if pod.desired == PodDesired.STOP and pod.stop_as:
        return PodStatus(pod.stop_as)
    return pod_status_from_exit(exit_code)


def apply_worker_state(
    pod: Pod,
    *,
    running: bool,
    exit_code: int | None = None,
    error: str = "",
    container_id: str = "",
    now: datetime | None = None,
) -> bool:
    """Record what an agent saw of one worker. Returns whether the pod changed.

    `running=True` moves Starting/Unknown → Running; `running=False` ends the pod with
    `final_pod_status`. Both are compare-and-set on a live status, so a re-sent report of an
    already final worker changes nothing.
    """
    now = now or timezone.now()
    with transaction.atomic():
        if running:
            changed = Pod.objects.filter(
                pk=pod.pk, status__in=[PodStatus.STARTING, PodStatus.UNKNOWN]
            ).update(
                status=PodStatus.RUNNING,
                started_at=pod.started_at or now,
                container_id=container_id or pod.container_id,
                last_report_at=now,
                status_reason="",
            )
        else:
            final = final_pod_status(pod, exit_code)
            reason = pod.stop_reason if final != pod_status_from_exit(exit_code) else ""
            changed = Pod.objects.filter(pk=pod.pk, status__in=list(ACTIVE_POD_STATUSES)).update(
                status=final,
                exit_code=exit_code,
                error_message=error[-4000:],
                status_reason=reason or (error.strip().splitlines() or [""])[-1][:300],
                container_id=container_id or pod.container_id,
                finished_at=now,
                last_report_at=now,
            )
        if changed:
            if running and pod.attempt > 1:
                _async_restart_ran(pod, now)
            reconcile_job(pod.job_id, now=now)
    return bool(changed)


def _async_restart_ran(pod: Pod, now: datetime) -> None:
    """An Asynchronous restart's new worker runs: its restart record is complete."""
    from jobs.models import RestartRecord

    RestartRecord.objects.filter(
        job_id=pod.job_id, to_attempt=pod.attempt, whole_job=False, running_at__isnull=True
    ).update(running_at=now)


def pod_status_from_exit(exit_code: int | None) -> PodStatus:
    return PodStatus.SUCCEEDED if exit_code == 0 else PodStatus.FAILED


def current_pods(job: Job) -> list[Pod]:
    """The job's current copy of each worker: per rank, its newest pod of an attempt up to
    the job's. (Asynchronous restarts replace one rank at a time, so ranks may differ.)"""
    newest: dict[int, Pod] = {}
    for pod in Pod.objects.filter(job_id=job.pk, attempt__lte=job.attempt).select_related("node"):
        if pod.rank not in newest or pod.attempt > newest[pod.rank].attempt:
            newest[pod.rank] = pod
    return [newest[rank] for rank in sorted(newest)]


def reconcile_job(job_id: int, *, now: datetime | None = None) -> list[JobChange]:
    """Bring the job status in line with its current workers (idempotent).

    A failure or a lost worker of a job with Automatic Fault Tolerance is handed to
    `jobs.faulttolerance.restart` instead of ending the job Failed; a job that just became
    Preempted is restarted there too."""
    from jobs.faulttolerance import restart

    now = now or timezone.now()
    job = Job.objects.get(pk=job_id)
    pods = current_pods(job)
    views = [
        PodView(
            p.rank,
            PodStatus(p.status),
            p.exit_code,
            p.status_reason or (p.error_message.strip().splitlines() or [""])[-1][:300],
        )
        for p in pods
    ]
    changes = derive_job_transitions(
        JobStatus(job.status),
        views,
        stop_requested=job.stop_requested_at is not None,
        stop_final_status=JobStatus(job.stop_final_status or JobStatus.STOPPED),
        stop_reason=job.stop_reason,
    )
    applied: list[JobChange] = []
    for change in changes:
        if change.to_status == JobStatus.FAILED and job.stop_requested_at is None:
            failed = [p for p in pods if p.status in (PodStatus.FAILED, PodStatus.LOST)]
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
            Pod.objects.filter(job_id=job_id, status__in=list(ACTIVE_POD_STATUSES)).update(
                desired=PodDesired.STOP,
                stop_as=PodStatus.STOPPED,
                stop_reason=f"job failed: {change.reason}",
                stop_requested_at=now,
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


def _first_hang_deadline(job: Job, now: datetime) -> datetime | None:
    """The hang clock starts when the attempt runs (only with hang detection on)."""
    from jobs.faulttolerance.hang import deadline_after
    from jobs.faulttolerance.restart import config_of

    config = config_of(job)
    return deadline_after(now, config.hang_timeout) if config.hang_detection else None
