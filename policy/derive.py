"""The job status derived from its workers' real states (docs/traps.md, "status that lies").
Pure: the simulator uses it as it is; `jobs.actions.workers` applies it to the database.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from policy.statuses import FINAL_POD_STATUSES, JobStatus, PodStatus


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


def pod_status_from_exit(exit_code: int | None) -> PodStatus:
    return PodStatus.SUCCEEDED if exit_code == 0 else PodStatus.FAILED


def final_pod_status(stop_as: str, exit_code: int | None) -> PodStatus:
    """How an exited worker ends: as ordered when the console stopped it (`stop_as`, empty
    when it was not stopped), else by its exit code."""
    if stop_as:
        return PodStatus(stop_as)
    return pod_status_from_exit(exit_code)
