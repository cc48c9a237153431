"""Job status transitions: compare-and-set on the current status plus a JobEvent, atomically.

Concurrency rule (docs/statuses.md): every write of `Job.status` goes through `transition()`, which
issues `UPDATE job SET status=<to> WHERE id=<id> AND status=<from>` and checks the row count.
When a user's stop and the scheduler's admission race on an Inqueue job, both UPDATEs name
`status='Inqueue'`; the database serialises them, the second matches no row and raises
`TransitionConflict`. No row locks are held across the decision.
"""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from jobs.hooks import Notice, announce_one
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

    with transaction.atomic():
        changed = Job.objects.filter(pk=job.pk, status=from_status).update(**updates)
        if changed != 1:
            raise TransitionConflict(job.pk, from_status)
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
    for name, value in updates.items():
        setattr(job, name, value)


def record_decision(job: Job, reason: str, *, actor: Actor, user=None) -> JobEvent:
    """An event that is not a status change (stop requested, worker restarted, …)."""
    return JobEvent.objects.create(
        job_id=job.pk, attempt=job.attempt, reason=reason, actor=actor, user=user
    )
