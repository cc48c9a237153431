"""The waiting jobs of the cycle's snapshot, read whole or, on PostgreSQL, incrementally
(docs/scheduling.md, "The snapshot's waiting jobs").

Decoding ten thousand waiting rows into `JobSnap`s is half of a cycle that changed nothing
(bench/scheduler.py --db). On PostgreSQL each process keeps the decoded rows of its last
read, each under its row's version: the pair (`xmin`, `cmin`) of the row's live tuple, which
every UPDATE replaces, also twice in one transaction (a new command id). A read asks the
database for the waiting jobs' ids and versions only, and for the whole row of just those
it has not seen at that version: new jobs, and any row some writer changed, whoever wrote it
and however. The rows come back from the database each time: a missed write can only make
the cache miss, never serve a stale row. The memory is dropped every REBUILD_AFTER_S and on
any error. On SQLite (the embedded console) every read decodes every row, as before.
"""

import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Case, DateTimeField, F, Q, TextField, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from jobs.models import Job
from jobs.scheduler.rows import WaitingRow
from policy.scheduler.model import JobSnap
from policy.statuses import WAITING_JOB_STATUSES, IdleResources, JobStatus

__all__ = ["Waiting", "forget", "read_waiting"]

REBUILD_AFTER_S = 600.0  # read every row again this often, whatever the versions say
_FETCH_ALL_SHARE = 2  # more than 1/2 of the rows unseen: read the whole queue in one go
_ID_CHUNK = 5000

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


def _version() -> RawSQL:
    table = connection.ops.quote_name(Job._meta.db_table)
    return RawSQL(f"{table}.xmin::text || '.' || {table}.cmin::text", ())  # noqa: S611


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
        return queue.annotate(row_version=_version()).values_list(
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


class _Seen:
    """This process's decoded rows by id, with the version each was decoded at. Replaced
    whole by each read (a reader in another thread keeps the dict it started with)."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[str, Waiting]] = {}
        self.since = time.monotonic()
        self.lock = threading.Lock()

    def forget(self) -> None:
        self.rows, self.since = {}, time.monotonic()


_seen = _Seen()


def forget() -> None:
    """Drop this process's decoded rows: the next read decodes every row."""
    with _seen.lock:
        _seen.forget()


def read_waiting(now: datetime, *, incremental: bool = False) -> list[Waiting]:
    """The jobs the cycle may admit now: Pending or Inqueue, not stopping, not backing off.
    `incremental` (the cycle, on PostgreSQL): only the rows not seen at their version."""
    if not incremental or connection.vendor != "postgresql":
        return [_decode(row) for row in _rows(_queue(now), versions=False)]
    try:
        return _read_incrementally(now)
    except Exception:
        forget()  # on any doubt, start again from the database
        raise


def _read_incrementally(now: datetime) -> list[Waiting]:
    with _seen.lock:
        if time.monotonic() - _seen.since > REBUILD_AFTER_S:
            _seen.forget()
        known = _seen.rows
    queue = _queue(now)
    current = list(queue.annotate(row_version=_version()).values_list("id", "row_version"))
    rows: dict[int, tuple[str, Waiting]] = {}
    unseen: list[int] = []
    for job_id, version in current:
        entry = known.get(job_id)
        if entry is not None and entry[0] == version:
            rows[job_id] = entry
        else:
            unseen.append(job_id)
    if unseen:
        # Read after the versions: a row changed meanwhile comes back newer, with its own
        # version; one that left the queue meanwhile does not come back and is not waiting.
        if len(unseen) * _FETCH_ALL_SHARE > len(current):
            rows = {}
            reads = [queue]
        else:
            reads = [
                queue.filter(id__in=unseen[i : i + _ID_CHUNK])
                for i in range(0, len(unseen), _ID_CHUNK)
            ]
        for read in reads:
            for row in _rows(read, versions=True):
                rows[row.id] = (row.row_version, _decode(row))
    with _seen.lock:
        _seen.rows = rows
    return [entry[1] for entry in rows.values()]
