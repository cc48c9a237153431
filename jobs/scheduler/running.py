"""The running jobs of the cycle's snapshot: placed jobs holding GPUs, the possible
preemption victims (docs/scheduling.md, "The snapshot's live pods").

On PostgreSQL the cycle keeps the placed jobs' decoded rows under their row versions
(`jobs.scheduler.versions`), and each job's `RunningSnap` while its row, its live pods
(`jobs.scheduler.live`), its newest checkpoint and its preemptions are the ones it was made
from: at 16,000 running jobs a cycle then builds only the ones that changed.
"""

import threading
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Max

from jobs.models import Checkpoint, Job
from jobs.scheduler.live import Holding
from jobs.scheduler.versions import RowMemory, row_version
from policy.scheduler.model import RunningSnap
from policy.statuses import PLACED_JOB_STATUSES, IdleResources

__all__ = ["forget", "read_running"]

_IDLE = {i.value: i for i in IdleResources}
_COLUMNS = (
    "id",
    "quota_id",
    "priority",
    "started_at",
    "stop_requested_at",
    "name",
    "idle_resources",
)


@dataclass(frozen=True, slots=True)
class _Placed:
    id: int
    quota_id: int
    priority: int
    started_at: datetime | None
    stopping: bool
    name: str
    idle_resources: IdleResources


@dataclass(frozen=True, slots=True)
class _Made:
    """A RunningSnap and what it was made from (compared by identity: each is rebuilt, not
    changed, when it changes)."""

    placed: _Placed
    held: Holding
    checkpoint: datetime | None
    preempted_at: tuple
    snap: RunningSnap


_memory = RowMemory()
_made: dict[int, _Made] = {}
_made_lock = threading.Lock()


def forget() -> None:
    """Drop this process's rows and snaps: the next read builds every one."""
    _memory.forget()
    with _made_lock:
        _made.clear()


def read_running(
    holders: dict[int, Holding], preempted_at: dict[int, tuple], *, incremental: bool = False
) -> tuple[RunningSnap, ...]:
    """Placed jobs holding GPUs, with their newest committed checkpoint (2 queries; one
    more on PostgreSQL in the cycle)."""
    placed = Job.objects.filter(status__in=[s.value for s in PLACED_JOB_STATUSES])
    checkpoints = dict(
        Checkpoint.objects.filter(committed=True, job__in=placed)
        .values("job_id")
        .annotate(last=Max("created_at"))
        .values_list("job_id", "last")
    )
    if incremental and connection.vendor == "postgresql":
        jobs = _memory.read(placed, _versioned_rows, _decode)
        with _made_lock:
            return _reuse(jobs, holders, checkpoints, preempted_at)
    rows = placed.values_list(*_COLUMNS, named=True)
    running = []
    for job in map(_decode, rows):
        held = holders.get(job.id)
        if held is not None:  # else no live worker: holds nothing
            running.append(_snap(job, held, checkpoints.get(job.id), preempted_at.get(job.id, ())))
    return tuple(running)


def _versioned_rows(read):
    return read.annotate(row_version=row_version(Job)).values_list(
        *_COLUMNS, "row_version", named=True
    )


def _decode(row) -> _Placed:
    return _Placed(
        id=row.id,
        quota_id=row.quota_id,
        priority=row.priority,
        started_at=row.started_at,
        stopping=row.stop_requested_at is not None,
        name=row.name,
        idle_resources=_IDLE[row.idle_resources],
    )


def _reuse(jobs: list[_Placed], holders, checkpoints, preempted_at) -> tuple[RunningSnap, ...]:
    made: dict[int, _Made] = {}
    for job in jobs:
        held = holders.get(job.id)
        if held is None:
            continue
        checkpoint, preempted = checkpoints.get(job.id), preempted_at.get(job.id, ())
        kept = _made.get(job.id)
        if (
            kept is None
            or kept.placed is not job
            or kept.held is not held
            or kept.checkpoint != checkpoint
            or kept.preempted_at != preempted
        ):
            kept = _Made(job, held, checkpoint, preempted, _snap(job, held, checkpoint, preempted))
        made[job.id] = kept
    _made.clear()
    _made.update(made)
    return tuple(m.snap for m in made.values())


def _snap(
    job: _Placed, held: Holding, checkpoint: datetime | None, preempted: tuple
) -> RunningSnap:
    return RunningSnap(
        id=job.id,
        quota_id=job.quota_id,
        charged_quota_id=held.charged_quota_id,
        in_quota=all(held.pods_in_quota),  # a partly-borrowing job is a borrower
        priority=job.priority,
        gpus_by_node=tuple(held.gpus_by_node),
        started_at=held.last_started_at or job.started_at,
        last_checkpoint_at=checkpoint,
        stopping=job.stopping,
        name=job.name,
        preempted_at=preempted,
        # Only when pooled: one lender is the common case and the cheaper snapshot.
        charges=tuple(held.charges) if len(set(held.charges)) > 1 else (),
        idle_resources=job.idle_resources,
        # Only when mixed: fair share counts a job's borrowed pods, not the job.
        pods_in_quota=tuple(held.pods_in_quota) if len(set(held.pods_in_quota)) > 1 else (),
    )
