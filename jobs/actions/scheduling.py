"""The scheduling cycle's writes: a plan applied to the database (DESIGN §5).

`jobs.scheduler.cycle.run_cycle` locks, loads the snapshot and calls the pure `plan()`;
`apply_plan` here writes the result, inside the cycle's transaction:

- admissions: the jobs → Starting (the bulk form of `transitions.transition`: rows locked
  with `SELECT … FOR UPDATE`, only those still in the status the snapshot saw move, one
  JobEvent each) and their pods;
- new waiters Pending → Inqueue the same way, and Inqueue jobs' reasons and queue positions
  refreshed when they changed (compare-and-set on status, no event);
- victims asked to stop as Preempted through `jobs.actions.stop.request_stop`.

Status and reason updates, events and pods are raw SQL: `bulk_update`, `bulk_create` and
model instances cost seconds for ten thousand jobs. On PostgreSQL each is ONE statement whose
rows travel as one JSON parameter (`_json_rows`), and row locks and look-ups take one array
(`= ANY(%s)`); SQLite keeps multi-row VALUES in batches (its parameter limit).
"""

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import NamedTuple

from django.db import connection, transaction
from django.utils import timezone

from cluster.models import GpuDevice
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.transitions import IllegalTransition, TransitionConflict
from jobs.actions.usage import record_charge_moves
from jobs.hooks import Notice, announce_one
from jobs.models import Job, JobEvent, Pod
from jobs.scheduler.model import Plan
from jobs.statuses import ACTIVE_POD_STATUSES, Actor, JobStatus, PodStatus, is_allowed

log = logging.getLogger(__name__)

_LOCK_BATCH = 2000  # ids per SELECT … FOR UPDATE (SQLite limits query parameters)
# Rows per UPDATE of waiting jobs (5 parameters each; SQLite allows 32,766 per statement).
_UPDATE_BATCH = 500
_INSERT_BATCH = 1000  # rows per INSERT of events (7 parameters each)


@dataclass(frozen=True, slots=True)
class CycleResult:
    admitted: tuple[int, ...] = ()
    pods_created: int = 0
    newly_queued: tuple[int, ...] = ()  # Pending → Inqueue
    waiting: int = 0  # jobs left waiting after this cycle
    reasons_updated: int = 0  # Inqueue jobs whose reason or position changed
    conflicts: tuple[int, ...] = ()  # jobs another writer moved first
    preempted: tuple[int, ...] = ()  # victims whose graceful preemption was requested
    charged_home: tuple[int, ...] = ()  # Acceptable borrowers now charged in their quota

    def as_dict(self) -> dict:
        return asdict(self)


class WaitingRow(NamedTuple):
    """What the shell needs of a waiting job beyond its JobSnap."""

    id: int
    status: str
    attempt: int
    status_reason: str
    queue_position: int | None
    gpus_per_worker: int
    cpus_per_worker: int
    memory_gb_per_worker: int


def apply_plan(decided: Plan, rows: dict[int, WaitingRow], now: datetime) -> CycleResult:
    """Write the plan. Must run inside the cycle's transaction (see `run_cycle`).

    Status changes (admissions → Starting, new waiters Pending → Inqueue) are the bulk form
    of `transitions.transition`: lock the rows (`SELECT … FOR UPDATE`; on SQLite the
    transaction already holds the write lock), keep only those still in the status the plan
    was made on, then one UPDATE plus one INSERT of JobEvents (per 500 rows on SQLite). A
    job that another writer moved first (a user's stop) is a conflict: skipped, no pods.
    Query count does not grow with the number of jobs on PostgreSQL (on SQLite, beyond one
    statement per 500 changed rows).
    """
    moves: dict[int, tuple[JobStatus, str, int | None]] = {}  # job → (to, reason, position)
    for admission in decided.admissions:
        moves[admission.job_id] = (JobStatus.STARTING, admission.reason, None)
    for decision in decided.queued:
        if rows[decision.job_id].status == JobStatus.PENDING:
            moves[decision.job_id] = (JobStatus.INQUEUE, decision.reason, decision.position)
    for job_id, (to_status, _, _) in moves.items():
        if not is_allowed(rows[job_id].status, to_status):
            raise IllegalTransition(rows[job_id].status, to_status)

    won = _lock_unchanged(rows, list(moves))
    conflicts = tuple(job_id for job_id in moves if job_id not in won)
    # (job id, from, to, reason, position) of every status change that goes ahead.
    changed = [
        (job_id, rows[job_id].status, to, why, pos)
        for job_id, (to, why, pos) in moves.items()
        if job_id in won
    ]
    if changed:
        if update_waiting(changed, now) != len(changed):
            # Impossible while the rows are locked; rolling back the cycle is the safe answer.
            raise RuntimeError("scheduler: locked job rows changed during the cycle")
        insert_events(
            [
                (job_id, rows[job_id].attempt, from_status, to_status, reason)
                for job_id, from_status, to_status, reason, _ in changed
            ],
            now,
        )

    admitted = tuple(a.job_id for a in decided.admissions if a.job_id in won)
    placed = [p for a in decided.admissions if a.job_id in won for p in a.placements]
    uuids = _gpu_uuids({p.node_id for p in placed if p.gpu_indices})
    pods = [  # in the order of _POD_VARYING
        (
            admission.job_id,
            rows[admission.job_id].attempt,
            p.rank,
            p.node_id,
            list(p.gpu_indices),
            _uuids_of(uuids, p.node_id, p.gpu_indices),
            rows[admission.job_id].gpus_per_worker,
            rows[admission.job_id].cpus_per_worker,
            rows[admission.job_id].memory_gb_per_worker,
            admission.charge_of(i),  # each pod its own lender (pooled idle jobs)
            admission.in_quota,
            PodStatus.STARTING,
        )
        for admission in decided.admissions
        if admission.job_id in won
        for i, p in enumerate(admission.placements)
    ]
    if pods:
        insert_pods(pods)

    # Jobs already Inqueue: refresh reason and position only when they changed. Not a
    # status change, so no JobEvent (or every cycle would spam the timeline).
    refreshed = [
        (d.job_id, JobStatus.INQUEUE, JobStatus.INQUEUE, d.reason, d.position)
        for d in decided.queued
        if d.job_id not in moves
        and (rows[d.job_id].status_reason, rows[d.job_id].queue_position) != (d.reason, d.position)
    ]
    # Compare-and-set on status: a job stopped meanwhile is left alone.
    reasons_updated = update_waiting(refreshed, now) if refreshed else 0
    charged_home = _charge_home(decided, now)
    preempted = _preempt(decided)
    return CycleResult(
        admitted=admitted,
        preempted=preempted,
        charged_home=charged_home,
        pods_created=len(pods),
        newly_queued=tuple(c[0] for c in changed if c[2] == JobStatus.INQUEUE),
        waiting=len(decided.queued),
        reasons_updated=reasons_updated,
        conflicts=conflicts,
    )


def _gpu_uuids(node_ids: set[int]) -> dict[tuple[int, int], str]:
    """(node, index) → UUID of the placed nodes' GPUs (one query, only when placing)."""
    if not node_ids:
        return {}
    if _postgres():  # one array parameter, not one placeholder per node
        with connection.cursor() as cursor:
            table = connection.ops.quote_name(GpuDevice._meta.db_table)
            cursor.execute(
                f'SELECT node_id, "index", uuid FROM {table} WHERE node_id = ANY(%s)',  # noqa: S608
                [sorted(node_ids)],
            )
            rows = cursor.fetchall()
    else:
        devices = GpuDevice.objects.filter(node_id__in=node_ids)
        rows = devices.values_list("node_id", "index", "uuid")
    return {(node_id, index): uuid for node_id, index, uuid in rows}


def _uuids_of(uuids: dict[tuple[int, int], str], node_id: int, indices) -> list[str]:
    """The placed GPUs' UUIDs, or none if one is unknown (the agent then maps the indices
    itself, and refuses the launch if one cannot be read)."""
    found = [uuids.get((node_id, i), "") for i in indices]
    return found if all(found) else []


class _ChargeMoved(Exception):
    """A pod of the job changed since the snapshot: its move home is undone."""


def _charge_home(decided: Plan, now: datetime) -> tuple[int, ...]:
    """Re-charge borrowing Acceptable jobs' pods to their own quota, in quota. One UPDATE
    per job, compare-and-set: only live pods still charged, not in quota, to the lenders
    the plan saw; if not exactly all of them move (one exited or moved meanwhile), the
    job's savepoint is rolled back and the next cycle decides again."""
    done = []
    live = [s.value for s in ACTIVE_POD_STATUSES]
    for move in decided.charges_home:
        try:
            with transaction.atomic():
                pods = Pod.objects.filter(
                    job_id=move.job_id,
                    status__in=live,
                    in_quota=False,
                    charged_quota_id__in=move.from_quota_ids,
                )
                # Usage history splits each pod's interval at its move (docs/usage-history.md).
                before = list(pods.values_list("pk", "charged_quota_id", "in_quota"))
                moved = pods.update(charged_quota_id=move.quota_id, in_quota=True)
                if moved != move.pods or len(before) != moved:
                    raise _ChargeMoved
                record_charge_moves(
                    ((pk, quota, in_quota, move.quota_id, True) for pk, quota, in_quota in before),
                    now,
                )
        except _ChargeMoved:
            log.info("scheduler: job #%d changed meanwhile; its charge stays", move.job_id)
            continue
        done.append(move.job_id)
    return tuple(done)


def _preempt(decided: Plan) -> tuple[int, ...]:
    """Ask each victim to stop gracefully as Preempted (a handful per cycle at most)."""
    if not decided.preemptions:
        return ()
    victims = Job.objects.in_bulk([p.job_id for p in decided.preemptions])
    done = []
    for p in decided.preemptions:
        job = victims.get(p.job_id)
        if job is None:
            continue
        try:
            request_stop(
                job, actor=Actor.SCHEDULER, final_status=JobStatus.PREEMPTED, reason=p.reason
            )
        except (JobNotActive, TransitionConflict):
            continue  # it ended meanwhile: its GPUs are being freed anyway
        if p.reclaim:
            announce_one(
                Notice.RECLAIMED, job, timezone.now(), reason=p.reason, actor=Actor.SCHEDULER
            )
        done.append(p.job_id)
    return tuple(done)


def _lock_unchanged(rows: dict[int, WaitingRow], job_ids: list[int]) -> set[int]:
    """Lock the jobs' rows; return those still in the status the snapshot saw."""
    won: set[int] = set()
    if _postgres() and job_ids:  # one array parameter, not one placeholder per job
        table, qn = Job._meta.db_table, connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, status FROM {qn(table)} WHERE id = ANY(%s) "  # noqa: S608
                "ORDER BY id FOR UPDATE",
                [job_ids],
            )
            won.update(job_id for job_id, status in cursor if status == rows[job_id].status)
        return won
    for i in range(0, len(job_ids), _LOCK_BATCH):
        chunk = job_ids[i : i + _LOCK_BATCH]
        # Ordered by id so two lockers of overlapping sets cannot deadlock.
        current = (
            Job.objects.select_for_update()
            .filter(pk__in=chunk)
            .order_by("pk")
            .values_list("id", "status")
        )
        won.update(job_id for job_id, status in current if status == rows[job_id].status)
    return won


def insert_events(items: list[tuple[int, int, str, str, str]], now: datetime) -> None:
    """JobEvents of the cycle's status changes, one multi-row INSERT per 1,000: building
    10,000 model instances for bulk_create costs about a second on its own."""
    qn = connection.ops.quote_name
    table = qn(JobEvent._meta.db_table)
    names = ("job", "created_at", "attempt", "from_status", "to_status", "reason", "actor")
    columns = ", ".join(qn(JobEvent._meta.get_field(f).column) for f in names)
    stamp = connection.ops.adapt_datetimefield_value(now)
    actor = str(Actor.SCHEDULER)
    if _postgres():
        record = [
            ("job_id", "bigint"),
            ("attempt", "integer"),
            ("from_status", "text"),
            ("to_status", "text"),
            ("reason", "text"),
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) "  # noqa: S608
                "SELECT v.job_id, %s, v.attempt, v.from_status, v.to_status, v.reason, %s "
                f"FROM {_json_rows(record)}",
                [stamp, actor, json.dumps(items)],
            )
        return
    with connection.cursor() as cursor:
        for i in range(0, len(items), _INSERT_BATCH):
            chunk = items[i : i + _INSERT_BATCH]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
            params = []
            for job_id, attempt, from_status, to_status, reason in chunk:
                params += [job_id, stamp, attempt, str(from_status), str(to_status), reason, actor]
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {values}", params)  # noqa: S608


def update_waiting(items: list[tuple[int, str, str, str, int | None]], now: datetime) -> int:
    """Set status, reason and position of many waiting jobs, one statement per batch.

    items: (job id, expected status, new status, reason, position). A row changes only if it
    is still in its expected status (compare-and-set). Returns the number of rows changed.
    `bulk_update` would do the same with a CASE per row and field, which costs seconds for a
    few thousand jobs on both databases; a join on a VALUES list costs milliseconds.
    (UPDATE … FROM needs SQLite 3.33+; Python 3.12 ships 3.40+.)
    """
    qn = connection.ops.quote_name
    table = qn(Job._meta.db_table)
    col = {f: qn(Job._meta.get_field(f).column) for f in ("id", "status", "status_reason")}
    position = qn(Job._meta.get_field("queue_position").column)
    updated_at = qn(Job._meta.get_field("updated_at").column)
    stamp = connection.ops.adapt_datetimefield_value(now)
    if _postgres():
        record = [
            ("job_id", "bigint"),
            ("expected", "text"),
            ("new_status", "text"),
            ("new_reason", "text"),
            ("new_position", "integer"),
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {col['status']} = v.new_status, "  # noqa: S608
                f"{col['status_reason']} = v.new_reason, {position} = v.new_position, "
                f"{updated_at} = %s FROM {_json_rows(record)} "
                f"WHERE {table}.{col['id']} = v.job_id AND {table}.{col['status']} = v.expected",
                [stamp, json.dumps(items)],
            )
            return cursor.rowcount
    total = 0
    with connection.cursor() as cursor:
        for i in range(0, len(items), _UPDATE_BATCH):
            chunk = items[i : i + _UPDATE_BATCH]
            values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
            cursor.execute(
                # VALUES columns are column1…column5 on both SQLite and PostgreSQL. No CTE:
                # Python's sqlite3 reports no rowcount for a statement starting with WITH.
                f"UPDATE {table} SET {col['status']} = v.new_status, "  # noqa: S608
                f"{col['status_reason']} = v.new_reason, "
                f"{position} = CAST(v.new_position AS integer), {updated_at} = %s "
                "FROM (SELECT column1 AS job_id, column2 AS expected, column3 AS new_status, "
                "column4 AS new_reason, column5 AS new_position "
                f"FROM (VALUES {values}) AS vals) AS v "
                f"WHERE {table}.{col['id']} = v.job_id AND {table}.{col['status']} = v.expected",
                # Plain str: a StrEnum reaches the driver as its value on every backend.
                [stamp] + [str(v) if isinstance(v, str) else v for item in chunk for v in item],
            )
            total += cursor.rowcount
    return total


# The columns of a new pod that differ from pod to pod; every other column takes the same
# value in all the cycle's pods (the model's defaults).
_POD_VARYING = (
    "job_id",
    "attempt",
    "rank",
    "node_id",
    "gpu_indices",
    "gpu_uuids",
    "gpus",
    "cpus",
    "memory_gb",
    "charged_quota_id",
    "in_quota",
    "status",
)


def insert_pods(pods: list[tuple]) -> None:
    """Create the admitted jobs' pods (rows of _POD_VARYING's columns) in one statement.

    On PostgreSQL the rows travel as one JSON parameter, every other column as one typed
    parameter taken from the model's defaults: `bulk_create` would send ~25 placeholders
    per pod, and building that statement (and the model instances) costs seconds for ten
    thousand pods. SQLite keeps `bulk_create`.
    """
    if not _postgres():
        Pod.objects.bulk_create(Pod(**dict(zip(_POD_VARYING, row, strict=True))) for row in pods)
        return
    qn = connection.ops.quote_name
    template = Pod()
    columns, selects, params, record = [], [], [], []
    for field in Pod._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(qn(field.column))
        is_json = field.get_internal_type() == "JSONField"
        kind = "jsonb" if is_json else field.cast_db_type(connection)
        if field.attname in _POD_VARYING:
            record.append((field.attname, kind))
            selects.append(f"v.{field.attname}")
        else:
            params.append(field.get_db_prep_save(field.pre_save(template, add=True), connection))
            selects.append(f"%s::{kind}")
    by_name = dict(record)
    rows = _json_rows([(name, by_name[name]) for name in _POD_VARYING])
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {qn(Pod._meta.db_table)} ({', '.join(columns)}) "  # noqa: S608
            f"SELECT {', '.join(selects)} FROM {rows}",
            [*params, json.dumps(pods)],
        )


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _json_rows(record: Sequence[tuple[str, str]]) -> str:
    """`(SELECT … FROM json_array_elements(%s::json)) AS v`: rows passed as ONE JSON array
    of arrays, columns named and typed by `record`. The server parses it in milliseconds and
    json.dumps is C: passing each column as an array costs psycopg ~5x more CPU (90 ms
    against 16 ms for 10,000 rows of 5 columns), one placeholder per value far more."""
    columns = ", ".join(
        f"(e -> {i})::{kind} AS {name}" if kind == "jsonb" else f"(e ->> {i})::{kind} AS {name}"
        for i, (name, kind) in enumerate(record)
    )
    return f"(SELECT {columns} FROM json_array_elements(%s::json) AS e) AS v"  # noqa: S608
