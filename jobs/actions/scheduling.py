"""The scheduling cycle's writes: a plan applied to the database (docs/scheduling.md).

`jobs.scheduler.cycle.run_cycle` locks, loads the snapshot and calls the pure `plan()`;
`apply_plan` here writes the result, inside the cycle's transaction:

- admissions: the jobs → Starting (the bulk form of `transitions.transition`: rows locked
  with `SELECT … FOR UPDATE`, only those still in the status the snapshot saw move, one
  JobEvent each) and their pods;
- new waiters Pending → Inqueue the same way, and Inqueue jobs' reasons and queue positions
  refreshed when they changed (compare-and-set on status, no event);
- victims asked to stop as Preempted through `jobs.actions.stop.request_stop`.

Status and reason updates, events and pods are raw SQL over a row source
(`jobs.actions.bulk`, where PostgreSQL and SQLite differ): `bulk_update`, `bulk_create` and
model instances cost seconds for ten thousand jobs.
"""

import logging
from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from cluster.models import GpuDevice
from jobs import triggers
from jobs.actions import bulk, rendezvous
from jobs.actions.charges import record_charge_moves
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.transitions import IllegalTransition, TransitionConflict, insert_events
from jobs.hooks import Notice, announce_one
from jobs.models import Job, Pod
from jobs.scheduler.rows import CycleResult, WaitingRow
from policy.scheduler.model import Admission, Plan, QueueDecision
from policy.statuses import ACTIVE_POD_STATUSES, Actor, JobStatus, PodStatus, is_allowed
from protocol import limits

log = logging.getLogger(__name__)

# (job id, expected status, new status, reason, position) of one waiting job's update.
type StatusChange = tuple[int, str, str, str, int | None]


def apply_plan(decided: Plan, rows: dict[int, WaitingRow], now: datetime) -> CycleResult:
    """Write the plan. Must run inside the cycle's transaction (see `run_cycle`).

    Status changes (admissions → Starting, new waiters Pending → Inqueue) are the bulk form
    of `transitions.transition`: lock the rows (`SELECT … FOR UPDATE`; on SQLite the
    transaction already holds the write lock), keep only those still in the status the plan
    was made on, then one UPDATE plus one INSERT of JobEvents. A job that another writer
    moved first (a user's stop) is a conflict: skipped, no pods. Query count does not grow
    with the number of jobs on PostgreSQL (on SQLite, beyond one statement per batch).
    """
    moves = _status_moves(decided, rows)
    # Victims and jobs whose charge moves are locked too, in the same id-ordered statement:
    # a heartbeat locks its jobs in id order before their pods (jobs.actions.workers), and
    # a cycle that took them one by one later could deadlock with it.
    also = [p.job_id for p in decided.preemptions] + [m.job_id for m in decided.charges_home]
    won = _lock_unchanged(rows, list(moves), also=also)
    conflicts = tuple(job_id for job_id in moves if job_id not in won)
    changed = [change for change in moves.values() if change[0] in won]
    if changed:
        if update_waiting(changed, now) != len(changed):
            # Impossible while the rows are locked; rolling back the cycle is the safe answer.
            raise RuntimeError("scheduler: locked job rows changed during the cycle")
        insert_events(
            [(job_id, rows[job_id].attempt, was, to, why) for job_id, was, to, why, _ in changed],
            now,
            Actor.SCHEDULER,
        )
    admitted = [a for a in decided.admissions if a.job_id in won]
    pods = _new_pods(admitted, rows)
    if pods:
        insert_pods(pods)
        # Where the new attempts' workers meet (docs/distributed.md).
        rendezvous.reserve(admitted, {a.job_id: rows[a.job_id].attempt for a in admitted})

    # Jobs already Inqueue: refresh reason and position when they changed (the deep part of
    # a queue at most every QUEUE_REFRESH_S). Not a status change, so no JobEvent (or every
    # cycle would spam the timeline).
    refreshed = [
        (d.job_id, JobStatus.INQUEUE, JobStatus.INQUEUE, d.reason, d.position)
        for d in decided.queued
        if d.job_id not in moves and refresh_due(rows[d.job_id], d, now)
    ]
    # Compare-and-set on status: a job stopped meanwhile is left alone.
    reasons_updated = update_waiting(refreshed, now) if refreshed else 0
    return CycleResult(
        admitted=tuple(a.job_id for a in admitted),
        preempted=_preempt(decided),
        charged_home=_charge_home(decided, now),
        pods_created=len(pods),
        newly_queued=tuple(c[0] for c in changed if c[2] == JobStatus.INQUEUE),
        waiting=len(decided.queued),
        reasons_updated=reasons_updated,
        conflicts=conflicts,
    )


def refresh_due(row: WaitingRow, decided: QueueDecision, now: datetime) -> bool:
    """Whether a waiting job's new reason or position is written now (docs/scheduling.md,
    "Reasons and positions"): at once in the head of its quota's queue, where people watch
    and the next admissions come from; behind it at most every QUEUE_REFRESH_S, since each
    admission moves everyone behind it up by one and rewriting a deep queue every cycle
    was most of a busy cycle's writes (and, PostgreSQL, of the next one's reads)."""
    if (row.status_reason, row.queue_position) == (decided.reason, decided.position):
        return False
    if decided.position <= limits.QUEUE_EXACT_POSITIONS or row.updated_at is None:
        return True
    return (now - row.updated_at).total_seconds() >= limits.QUEUE_REFRESH_S


def _status_moves(decided: Plan, rows: dict[int, WaitingRow]) -> dict[int, StatusChange]:
    """The plan's status changes (admissions → Starting, Pending → Inqueue), each checked
    against the lifecycle (docs/statuses.md)."""
    moves: dict[int, StatusChange] = {}
    for admission in decided.admissions:
        job_id = admission.job_id
        moves[job_id] = (job_id, rows[job_id].status, JobStatus.STARTING, admission.reason, None)
    for d in decided.queued:
        if rows[d.job_id].status == JobStatus.PENDING:
            moves[d.job_id] = (d.job_id, JobStatus.PENDING, JobStatus.INQUEUE, d.reason, d.position)
    for _, was, to, _, _ in moves.values():
        if not is_allowed(was, to):
            raise IllegalTransition(was, to)
    return moves


def _new_pods(admitted: Sequence[Admission], rows: dict[int, WaitingRow]) -> list[tuple]:
    """The admitted jobs' pods, rows of `_POD_VARYING`'s columns."""
    placed = [p for a in admitted for p in a.placements]
    uuids = _gpu_uuids({p.node_id for p in placed if p.gpu_indices})
    return [
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
        for admission in admitted
        for i, p in enumerate(admission.placements)
    ]


def _gpu_uuids(node_ids: set[int]) -> dict[tuple[int, int], str]:
    """(node, index) → UUID of the placed nodes' GPUs (one query, only when placing)."""
    if not node_ids:
        return {}
    table = connection.ops.quote_name(GpuDevice._meta.db_table)
    found = {}
    for condition, params in bulk.id_conditions("node_id", sorted(node_ids)):
        sql = f'SELECT node_id, "index", uuid FROM {table} WHERE {condition}'  # noqa: S608
        found.update(((node_id, index), uuid) for node_id, index, uuid in bulk.fetch(sql, params))
    return found


def _uuids_of(uuids: dict[tuple[int, int], str], node_id: int, indices) -> list[str]:
    """The placed GPUs' UUIDs, or none if one is unknown (the agent then maps the indices
    itself, and refuses the launch if one cannot be read)."""
    found = [uuids.get((node_id, i), "") for i in indices]
    return found if all(found) else []


class _ChargeMoved(Exception):
    """A pod of the job changed since the snapshot: its move home is undone."""


def _charge_home(decided: Plan, now: datetime) -> tuple[int, ...]:
    """Charge moves (docs/quota-tree.md): borrowing Acceptable jobs' pods re-charged to their
    own quota, in quota, and borrowers moved to another lender (still not in quota). One UPDATE
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
                moved = pods.update(charged_quota_id=move.quota_id, in_quota=move.in_quota)
                if moved != move.pods or len(before) != moved:
                    raise _ChargeMoved
                record_charge_moves(
                    (
                        (pk, quota, in_quota, move.quota_id, move.in_quota)
                        for pk, quota, in_quota in before
                    ),
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


def _lock_unchanged(
    rows: dict[int, WaitingRow], job_ids: list[int], also: Sequence[int] = ()
) -> set[int]:
    """Lock the jobs' rows and those of `also` (ordered by id, so two lockers of overlapping
    sets cannot deadlock); return the `job_ids` still in the status the snapshot saw."""
    table = connection.ops.quote_name(Job._meta.db_table)
    moving = set(job_ids)
    won: set[int] = set()
    for condition, params in bulk.id_conditions("id", sorted(moving.union(also))):
        sql = f"SELECT id, status FROM {table} WHERE {condition} ORDER BY id"  # noqa: S608
        current = bulk.fetch(sql + bulk.for_update(), params)
        won.update(
            job_id
            for job_id, status in current
            if job_id in moving and status == rows[job_id].status
        )
    return won


_STATUS_RECORD = (
    ("job_id", "bigint"),
    ("expected", "text"),
    ("new_status", "text"),
    ("new_reason", "text"),
    ("new_position", "integer"),
)


def update_waiting(items: list[StatusChange], now: datetime) -> int:
    """Set status, reason and position of many waiting jobs, one statement per batch.

    A row changes only if it is still in its expected status (compare-and-set). Returns the
    number of rows changed. `bulk_update` would do the same with a CASE per row and field,
    which costs seconds for a few thousand jobs on both databases; a join on a row source
    costs milliseconds.
    """
    qn = connection.ops.quote_name
    table = qn(Job._meta.db_table)
    col = {f: qn(Job._meta.get_field(f).column) for f in ("id", "status", "status_reason")}
    position = qn(Job._meta.get_field("queue_position").column)
    updated_at = qn(Job._meta.get_field("updated_at").column)
    stamp = connection.ops.adapt_datetimefield_value(now)
    total = 0
    for source, params in bulk.row_sources(_STATUS_RECORD, items):
        total += bulk.execute(
            f"UPDATE {table} SET {col['status']} = v.new_status, "  # noqa: S608
            f"{col['status_reason']} = v.new_reason, {position} = v.new_position, "
            f"{updated_at} = %s FROM {source} "
            f"WHERE {table}.{col['id']} = v.job_id AND {table}.{col['status']} = v.expected",
            [stamp, *params],
        )
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


def _pod_columns() -> tuple[list[str], list[str], list, dict[str, str]]:
    """(columns, SELECT list, parameters of the constant columns, varying column → type)."""
    qn = connection.ops.quote_name
    template = Pod()
    columns, selects, params, kinds = [], [], [], {}
    for field in Pod._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(qn(field.column))
        is_json = field.get_internal_type() == "JSONField"
        kind = "jsonb" if is_json else field.cast_db_type(connection)
        if field.attname in _POD_VARYING:
            kinds[field.attname] = kind
            selects.append(f"v.{field.attname}")
        else:
            params.append(field.get_db_prep_save(field.pre_save(template, add=True), connection))
            selects.append(bulk.typed("%s", kind))
    return columns, selects, params, kinds


def insert_pods(pods: list[tuple]) -> None:
    """Create the admitted jobs' pods (rows of _POD_VARYING's columns): the varying columns
    from a row source, every other column one parameter taken from the model's defaults
    (`bulk_create` would send ~25 placeholders per pod, and building that statement and the
    model instances costs seconds for ten thousand pods)."""
    columns, selects, constants, kinds = _pod_columns()
    record = [(name, kinds[name]) for name in _POD_VARYING]
    table = connection.ops.quote_name(Pod._meta.db_table)
    for source, params in bulk.row_sources(record, pods):
        bulk.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) "  # noqa: S608
            f"SELECT {', '.join(selects)} FROM {source}",
            [*constants, *params],
        )
    triggers.wake_agents()  # the nodes' agents hear of them now, not at the next poll
