"""Job status transitions: compare-and-set on the current status plus a JobEvent, atomically.

Concurrency rule (docs/statuses.md): every write of `Job.status` goes through `transition()` (or
its bulk forms: `finish_many` here, the scheduler's in `jobs.actions.scheduling`), which
issues `UPDATE job SET status=<to> WHERE id=<id> AND status=<from>` and checks the row count.
When a user's stop and the scheduler's admission race on an Inqueue job, both UPDATEs name
`status='Inqueue'`; the database serialises them, the second matches no row and raises
`TransitionConflict`. No row locks are held across the decision.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from jobs.actions import bulk
from jobs.hooks import JobNotice, Notice, announce, announce_one
from jobs.models import Job, JobEvent
from jobs.triggers import request_scheduling
from policy.statuses import FINAL_JOB_STATUSES, Actor, JobStatus, is_allowed


class IllegalTransition(Exception):
    """The lifecycle never allows this (from, to) pair."""

    def __init__(self, from_status: str, to_status: str) -> None:
        super().__init__(f"a job cannot go from {from_status} to {to_status}")
        self.from_status = from_status
        self.to_status = to_status


class TransitionConflict(Exception):
    """The job was no longer in the expected status: another writer won the race."""

    def __init__(self, job_id: int, expected: str) -> None:
        super().__init__(f"job {job_id} is no longer {expected}")
        self.job_id = job_id
        self.expected = expected


# Transitions that free or may free capacity, or add demand: the scheduler should look.
_WAKES_SCHEDULER = FINAL_JOB_STATUSES | {JobStatus.PENDING}


def transition(
    job: Job,
    to_status: JobStatus | str,
    *,
    reason: str,
    actor: Actor,
    user=None,
    expected: JobStatus | str | None = None,
    now: datetime | None = None,
    **fields,
) -> None:
    """Move `job` from `expected` (default: its in-memory status) to `to_status`.

    Raises IllegalTransition for a pair the lifecycle forbids and TransitionConflict when the
    stored status is not `expected`. Extra `fields` are written in the same UPDATE. On
    success the in-memory `job` reflects the new row.
    """
    from_status = JobStatus(expected or job.status)
    to_status = JobStatus(to_status)
    if not is_allowed(from_status, to_status):
        raise IllegalTransition(from_status, to_status)
    now = now or timezone.now()
    updates = {"status": to_status, "status_reason": reason, "updated_at": now, **fields}
    if to_status != JobStatus.INQUEUE:
        updates.setdefault("queue_position", None)
    if to_status == JobStatus.RUNNING and job.started_at is None:
        updates.setdefault("started_at", now)
    if to_status in FINAL_JOB_STATUSES:
        updates.setdefault("finished_at", now)
    elif to_status == JobStatus.PENDING:
        updates.setdefault("finished_at", None)

    # No savepoint of its own (it cost two statements a transition): a conflict writes
    # nothing (the UPDATE matched no row), so it is raised after the block; any other error
    # fails the caller's transaction, or the caller's savepoint.
    with transaction.atomic(savepoint=False):
        changed = Job.objects.filter(pk=job.pk, status=from_status).update(**updates)
        if changed == 1:
            JobEvent.objects.create(
                job_id=job.pk,
                attempt=updates.get("attempt", job.attempt),
                from_status=from_status,
                to_status=to_status,
                reason=reason,
                actor=actor,
                user=user,
            )
            announce_one(
                Notice.STATUS,
                job,
                now,
                reason=reason,
                actor=actor,
                user=user,
                from_status=from_status,
                to_status=to_status,
                attempt=updates.get("attempt", job.attempt),
                detail={"exit_code": updates["exit_code"]} if "exit_code" in updates else {},
            )
            if to_status in _WAKES_SCHEDULER:
                request_scheduling()
    if changed != 1:
        raise TransitionConflict(job.pk, from_status)
    for name, value in updates.items():
        setattr(job, name, value)


@dataclass(frozen=True)
class Finish:
    """One job's move to a final status (`finish_many`), from its in-memory status."""

    job: Job
    to_status: JobStatus
    reason: str
    exit_code: int | None = None


_FINISH_RECORD = (
    ("job_id", "bigint"),
    ("expected", "text"),
    ("to_status", "text"),
    ("reason", "text"),
    ("exit_code", "integer"),
)


def finish_many(moves: Sequence[Finish], *, actor: Actor, now: datetime) -> set[int]:
    """`transition` to a final status for many jobs at once (a heartbeat's exits; one by
    one they cost two statements a job, bench/percall.py): one UPDATE joined on a row
    source, each row a compare-and-set on the job's in-memory status, one INSERT of their
    JobEvents, their notices announced together, one scheduling request. A job another
    writer moved meanwhile is left as it is (`transition` would raise TransitionConflict).
    Returns the ids of the jobs moved; those objects reflect their new rows."""
    for move in moves:
        if move.to_status not in FINAL_JOB_STATUSES:
            raise ValueError(f"finish_many moves to final statuses only, not {move.to_status}")
        if not is_allowed(JobStatus(move.job.status), move.to_status):
            raise IllegalTransition(move.job.status, move.to_status)
    rows = [(m.job.pk, m.job.status, m.to_status, m.reason, m.exit_code) for m in moves]
    table, col = connection.ops.quote_name(Job._meta.db_table), bulk.columns(Job)
    stamp = connection.ops.adapt_datetimefield_value(now)
    moved: set[int] = set()
    for source, params in bulk.row_sources(_FINISH_RECORD, rows) if rows else ():
        found = bulk.fetch(
            f"UPDATE {table} SET {col['status']} = v.to_status, "  # noqa: S608
            f"{col['status_reason']} = v.reason, {col['updated_at']} = %s, "
            f"{col['exit_code']} = COALESCE(v.exit_code, {table}.{col['exit_code']}), "
            f"{col['queue_position']} = NULL, {col['finished_at']} = %s FROM {source} "
            f"WHERE {table}.{col['id']} = v.job_id AND {table}.{col['status']} = v.expected "
            f"RETURNING {table}.{col['id']}",
            [stamp, stamp, *params],
        )
        moved.update(row[0] for row in found)
    done = [m for m in moves if m.job.pk in moved]
    if not done:
        return moved
    # Stamped now, as `transition`'s events are (auto_now_add): after an earlier move of
    # the same job in this transaction (Starting → Running), so the timeline keeps order.
    events = [(m.job.pk, m.job.attempt, m.job.status, m.to_status, m.reason) for m in done]
    insert_events(events, timezone.now(), actor)
    notices = [
        JobNotice(
            kind=Notice.STATUS, job=m.job, at=now, reason=m.reason, actor=actor,
            from_status=m.job.status, to_status=m.to_status, attempt=m.job.attempt,
            detail={"exit_code": m.exit_code} if m.exit_code is not None else {},
        )
        for m in done
    ]  # fmt: skip
    announce(notices)
    request_scheduling()  # a final status frees capacity (_WAKES_SCHEDULER)
    for m in done:
        job = m.job
        job.status, job.status_reason, job.updated_at = m.to_status, m.reason, now
        job.queue_position, job.finished_at = None, now
        if m.exit_code is not None:
            job.exit_code = m.exit_code
    return moved


_EVENT_RECORD = (
    ("job_id", "bigint"),
    ("attempt", "integer"),
    ("from_status", "text"),
    ("to_status", "text"),
    ("reason", "text"),
)


def insert_events(items: list[tuple[int, int, str, str, str]], now: datetime, actor: Actor) -> None:
    """JobEvents of many status changes (rows of `_EVENT_RECORD`) by one actor, one
    statement: building 10,000 model instances for bulk_create costs about a second on its
    own (a scheduling cycle's)."""
    qn = connection.ops.quote_name
    table = qn(JobEvent._meta.db_table)
    names = ("job", "created_at", "attempt", "from_status", "to_status", "reason", "actor")
    columns = ", ".join(qn(JobEvent._meta.get_field(f).column) for f in names)
    stamp = connection.ops.adapt_datetimefield_value(now)
    for source, params in bulk.row_sources(_EVENT_RECORD, items):
        bulk.execute(
            f"INSERT INTO {table} ({columns}) "  # noqa: S608
            f"SELECT v.job_id, {bulk.typed('%s', 'timestamptz')}, v.attempt, v.from_status, "
            f"v.to_status, v.reason, %s FROM {source}",
            [stamp, str(actor), *params],
        )


def record_decision(job: Job, reason: str, *, actor: Actor, user=None) -> JobEvent:
    """An event that is not a status change (stop requested, worker restarted, …)."""
    return JobEvent.objects.create(
        job_id=job.pk, attempt=job.attempt, reason=reason, actor=actor, user=user
    )
