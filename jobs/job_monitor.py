"""The job monitor (docs/fault-tolerance.md): hang detection and max runtime. Level-triggered,
idempotent.

Hangs use an indexed deadline column, like healthchecks' `alert_after`: `Job.hang_deadline`
is `hang.deadline_after(last activity, timeout)`, set when an attempt starts running and
pushed forward by each new progress step (or, without progress reports, each new distinct
log line) as it is stored. The monitor selects `hang_deadline < now` (partial index
`job_hang_deadline`) and claims each job with a compare-and-set that clears the deadline it
saw; only the copy whose UPDATE matched acts, so two monitors (two beat processes, a
redelivered task) never restart a job twice. When acting raises, the deadline is pushed
forward so one bad row cannot crash-loop the monitor.

The node's state decides first: a job whose node went silent before its deadline (a frozen
or cut-off agent) is not judged hung while the node says nothing; the node monitor's path
(NotReady, then Lost) handles it (`hang.silence_is_the_nodes`). The monitor looks again each
cycle: once the node reports again, new progress moves the deadline, none means a hang.

Max runtime: a placed job running longer than `max_runtime_seconds` (since it first ran) is
terminated at once (`request_stop(final_status=Terminated)`, grace 0).
"""

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from cluster.models import GpuDevice, NodeState
from jobs.actions.progress import (
    claim_hung_job,
    clear_stale_hang_deadlines,
    postpone_hang_check,
)
from jobs.actions.restarts import handle_hang
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.transitions import TransitionConflict
from jobs.actions.workers import current_pods
from jobs.models import Job, Pod
from policy.faulttolerance import hang
from policy.faulttolerance.policy import config_of
from policy.statuses import ACTIVE_POD_STATUSES, Actor, JobStatus, PodStatus

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR = timedelta(seconds=60)


@dataclass
class JobMonitorResult:
    hung: list[int] = field(default_factory=list)
    node_silent: list[int] = field(default_factory=list)  # past the deadline, node silent
    terminated: list[int] = field(default_factory=list)
    cleared: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _gpu_utilization(pods) -> tuple[list[int], int]:
    """Known utilization of the GPUs the running workers hold (supporting evidence), and
    how many of them have none known (MIG mode, unreadable): unknown is not idle."""
    wanted = {(p.node_id, i) for p in pods if p.node_id for i in (p.gpu_indices or [])}
    if not wanted:
        return [], 0
    rows = GpuDevice.objects.filter(node_id__in={n for n, _ in wanted}).values_list(
        "node_id", "index", "utilization"
    )
    mine = [util for node_id, index, util in rows if (node_id, index) in wanted]
    known = [u for u in mine if u is not None]
    return known, len(mine) - len(known)


def hang_evidence(job: Job, seen_deadline: datetime, now: datetime) -> str:
    config = config_of(job)
    pods = [p for p in current_pods(job) if p.status == PodStatus.RUNNING]
    progress = [p.progress_at for p in pods if p.progress_at is not None]
    quiet_since = seen_deadline - timedelta(seconds=config.hang_timeout)
    utilization, unknown = _gpu_utilization(pods)
    state = hang.HangInput(
        timeout_seconds=config.hang_timeout,
        running_since=job.started_at or quiet_since,
        last_progress_at=max(progress) if progress else None,
        last_new_line_at=None if progress else quiet_since,
        gpu_utilization=utilization,
        gpu_utilization_unknown=unknown,
    )
    return hang.hang_reason(state, now)


def _nodes_of_live_workers(job_id: int) -> list[hang.NodeHeard]:
    rows = (
        Pod.objects.filter(job_id=job_id, attempt=F("job__attempt"), node__isnull=False)
        .filter(status__in=ACTIVE_POD_STATUSES)
        .order_by()
        .values_list("node__state", "node__last_heartbeat_at")
        .distinct()
    )
    return [hang.NodeHeard(state == NodeState.READY, heard) for state, heard in rows]


def _act_on_hang(job_id: int, seen: datetime, now: datetime, result: JobMonitorResult) -> None:
    with transaction.atomic():
        if not claim_hung_job(job_id, seen):
            return  # it made progress meanwhile, or another monitor got here first
        job = Job.objects.get(pk=job_id)
        evidence = hang_evidence(job, seen, now)
        log.warning("job %s is hung: %s", job_id, evidence)
        handle_hang(job, evidence, now=now)
    result.hung.append(job_id)


def check_hangs(now: datetime, result: JobMonitorResult) -> None:
    # Deadlines left on jobs that no longer run (finished, restarting) mean nothing.
    result.cleared += clear_stale_hang_deadlines(now)
    due = Job.objects.filter(
        hang_deadline__lt=now, status=JobStatus.RUNNING, stop_requested_at__isnull=True
    ).values_list("id", "hang_deadline")
    for job_id, seen in due:
        if hang.silence_is_the_nodes(seen, _nodes_of_live_workers(job_id)):
            result.node_silent.append(job_id)
            continue
        try:
            _act_on_hang(job_id, seen, now, result)
        except TransitionConflict:
            continue  # the job moved meanwhile; the next cycle looks again
        except Exception:
            log.exception("job monitor: acting on hung job %s failed; retrying later", job_id)
            postpone_hang_check(job_id, seen, now + RETRY_AFTER_ERROR)


def check_max_runtime(now: datetime, result: JobMonitorResult) -> None:
    placed = Job.objects.filter(
        status__in=[JobStatus.STARTING, JobStatus.RUNNING],
        max_runtime_seconds__isnull=False,
        started_at__isnull=False,
    ).exclude(stop_final_status=JobStatus.TERMINATED)
    for job in placed.only("id", "status", "started_at", "max_runtime_seconds"):
        if now < job.started_at + timedelta(seconds=job.max_runtime_seconds):
            continue
        try:
            request_stop(
                job,
                actor=Actor.MONITOR,
                reason=f"max runtime of {job.max_runtime_seconds}s exceeded",
                final_status=JobStatus.TERMINATED,
            )
        except (JobNotActive, TransitionConflict):
            continue
        except Exception:
            log.exception("job monitor: terminating job %s failed", job.pk)
            continue
        result.terminated.append(job.pk)


def run_job_monitor(now: datetime | None = None) -> JobMonitorResult:
    now = now or timezone.now()
    result = JobMonitorResult()
    check_hangs(now, result)
    check_max_runtime(now, result)
    return result
