"""The waiting jobs of the cycle's snapshot, read whole or, on PostgreSQL, incrementally
(docs/scheduling.md, "The snapshot's waiting jobs").

Decoding ten thousand waiting rows into `JobSnap`s is half of a cycle that changed nothing
(bench/scheduler.py --db). On PostgreSQL each process keeps the decoded rows of its last
read, each under its row's version, and decodes again only the rows that are new or that
any writer changed (`jobs.scheduler.versions`). On SQLite (the embedded console) every read
decodes every row, as before.
"""

import json
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Case, DateTimeField, F, Q, TextField, Value, When
from django.db.models.functions import Cast

from jobs.models import Job
from jobs.scheduler.rows import WaitingRow
from jobs.scheduler.versions import RowMemory, row_version
from policy.scheduler.model import JobSnap
from policy.statuses import WAITING_JOB_STATUSES, IdleResources, JobStatus

__all__ = ["Waiting", "forget", "read_waiting"]

_JOB_STATUS = {s.value: s for s in JobStatus}
_IDLE = {i.value: i for i in IdleResources}
_NO_JSON_LIST = (None, "", "[]", "null")
_COLUMNS = (
    "id",
    "quota_id",
    "workers",
    "gpus_per_worker",
    "cpus_per_worker",
    "memory_gb_per_worker",
    "priority",
    "created_at",
    "status",
    "idle_resources",
    "attempt",
    "status_reason",
    "queue_position",
    "name",
    "restart_waiting_since",
    "excluded_text",
    "updated_at",
)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A waiting job as its row says: `job` has no live pods and no recent reclaims (those
    come from other tables and are set by the snapshot, `dataclasses.replace`)."""

    job: JobSnap
    row: WaitingRow


def _queue(now: datetime):
    # A fault-tolerance restart backing off after a crash (restart_not_before) waits.
    return Job.objects.filter(
        Q(restart_not_before__isnull=True) | Q(restart_not_before__lte=now),
        status__in=list(WAITING_JOB_STATUSES),
        stop_requested_at__isnull=True,
    )


def _rows(queue, *, versions: bool):
    queue = queue.annotate(
        # Decoded only where there is something to decode: ten thousand datetimes and JSON
        # lists are a measurable part of a cycle (bench/scheduler.py --db --profile).
        restart_waiting_since=Case(
            When(attempt__gt=1, status=JobStatus.PENDING, then=F("updated_at")),
            default=Value(None),
            output_field=DateTimeField(),
        ),
        excluded_text=Cast("excluded_nodes", TextField()),
    )
    if versions:
        return queue.annotate(row_version=row_version(Job)).values_list(
            *_COLUMNS, "row_version", named=True
        )
    return queue.values_list(*_COLUMNS, named=True)


def _decode(row) -> Waiting:
    text = row.excluded_text
    excluded = json.loads(text) if text not in _NO_JSON_LIST else None
    job = JobSnap(
        id=row.id,
        quota_id=row.quota_id,
        workers=row.workers,
        gpus_per_worker=row.gpus_per_worker,
        cpus_per_worker=row.cpus_per_worker,
        memory_gb_per_worker=row.memory_gb_per_worker,
        priority=row.priority,
        submitted_at=row.created_at,
        status=_JOB_STATUS[row.status],
        idle_resources=_IDLE[row.idle_resources],
        name=row.name,
        # A restart attempt waits from when it went back to Pending.
        waiting_since=row.restart_waiting_since,
        excluded_node_ids=(frozenset(e["id"] for e in excluded) if excluded else frozenset()),
    )
    waiting_row = WaitingRow(
        id=row.id,
        status=row.status,
        attempt=row.attempt,
        status_reason=row.status_reason,
        queue_position=row.queue_position,
        gpus_per_worker=row.gpus_per_worker,
        cpus_per_worker=row.cpus_per_worker,
        memory_gb_per_worker=row.memory_gb_per_worker,
        updated_at=row.updated_at,
    )
    return Waiting(job, waiting_row)


_memory = RowMemory()


def forget() -> None:
    """Drop this process's decoded rows: the next read decodes every row."""
    _memory.forget()


def read_waiting(now: datetime, *, incremental: bool = False) -> list[Waiting]:
    """The jobs the cycle may admit now: Pending or Inqueue, not stopping, not backing off.
    `incremental` (the cycle, on PostgreSQL): only the rows not seen at their version."""
    if not incremental or connection.vendor != "postgresql":
        return [_decode(row) for row in _rows(_queue(now), versions=False)]
    return _memory.read(_queue(now), lambda read: _rows(read, versions=True), _decode)
