"""What the audit log hears: the jobs core's notices and the quota changes (both registered
by the shell at start-up, `console.triggers.install`) and Django's failed sign-ins
(`audit.apps`)."""

import logging
from collections.abc import Sequence

from django.db import transaction

from audit.actions import Entry, record, record_many
from jobs.hooks import JobNotice, Notice
from policy.statuses import JobStatus
from quotas.hooks import QuotaChange

log = logging.getLogger(__name__)

_STOP_ACTIONS = {
    JobStatus.STOPPED: "job.stop",
    JobStatus.TERMINATED: "job.terminate",
    JobStatus.PREEMPTED: "job.preempt",
}


def _action(notice: JobNotice) -> str | None:
    if notice.kind == Notice.SUBMITTED:
        return "job.submit"
    if notice.kind == Notice.RESUBMITTED:
        return "job.restart"
    if notice.kind == Notice.STOP_REQUESTED:
        return _STOP_ACTIONS.get(notice.detail.get("final_status", ""), "job.stop")
    return None


def on_job_notices(notices: Sequence[JobNotice]) -> None:
    """Actions a person took on jobs (the scheduler's and agents' are in the job timeline)."""
    entries = []
    for notice in notices:
        action = _action(notice)
        if action is None or notice.user is None:
            continue
        detail = {"reason": notice.reason} if notice.reason else {}
        detail.update(notice.detail)
        entries.append(
            Entry(
                action,
                actor=notice.user,
                object_type="job",
                object_id=notice.job.pk,
                object_repr=f"{notice.job.name} (#{notice.job.pk})",
                detail=detail,
                at=notice.at,
            )
        )
    if entries:
        # A savepoint: a failed insert must not abort the change being audited.
        with transaction.atomic():
            record_many(entries)


def _plain(value):
    """A value the JSON detail can hold (ids, numbers and text as they are)."""
    return (
        value if value is None or isinstance(value, bool | int | float | str | list) else str(value)
    )


def on_quota_change(change: QuotaChange) -> None:
    """Every write of a tenant, workspace, member or quota, whoever made it (an admin, a
    quota owner in the admin, a command): each field's before and after."""
    changes = {name: [_plain(old), _plain(new)] for name, (old, new) in change.changes.items()}
    about = {name: _plain(value) for name, value in change.about.items()}
    message = "; ".join(
        [f"{name} {value}" for name, value in about.items()]
        + [f"{name}: {old} → {new}" for name, (old, new) in changes.items()]
    )
    detail = {"changes": changes, "message": message}
    if about:
        detail["about"] = about  # what the change concerns, unchanged (a role's member)
    # A savepoint: a failed insert must not abort the change being audited.
    with transaction.atomic():
        record(
            change.action,
            actor=change.actor,
            object_type=change.object_type,
            object_id=change.object_id or "",
            object_repr=change.object_repr,
            detail=detail,
            at=change.at,
        )


def on_login_failed(sender, credentials: dict, request=None, **kwargs) -> None:
    """A refused sign-in (console or admin): denied access, with the name that was tried."""
    name = str(credentials.get("username") or "")[:150]
    limited = bool(request is not None and getattr(request, "login_retry_after", 0))
    try:
        with transaction.atomic():
            record(
                "login.failed",
                actor_name=name,
                object_type="user",
                object_repr=name,
                detail={"rate_limited": limited},
            )
    except Exception:
        log.exception("audit: recording a failed sign-in failed")
