"""Denied access in the audit log: a signed-in user (or an API token's) refused a page or
an API object they may not see (`quotas.access.HiddenObject`: a 404 that exists) or an
action they may not take (a 403). One entry per denial, bounded so that it cannot flood the
log: the same user and object once a minute, and at most
`protocol.limits.AUDITED_DENIALS_PER_MINUTE` entries per user a minute (the one past that
says further ones were not recorded). The counters are the rate limits' (`accounts.ratelimit`:
Redis or the database, shared by every process). docs/domain.md ("Denied access")."""

import logging

from django.db import transaction
from django.http import HttpRequest

from accounts import ratelimit
from accounts.addresses import client_address
from audit.actions import record
from protocol.limits import AUDITED_DENIALS_PER_MINUTE

log = logging.getLogger(__name__)

PER_OBJECT = ratelimit.Limit(1, 60)
PER_USER = ratelimit.Limit(AUDITED_DENIALS_PER_MINUTE, 60)


def _who(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return f"address:{client_address(request)}"


def record_denial(
    request: HttpRequest, status: int, object_type: str, object_id: int | str, reason: str
) -> bool:
    """Record one denied access unless the bounds say it was already told; whether an
    entry was written. Never fails the request it is part of."""
    who = _who(request)
    try:
        if not ratelimit.hit("audit-denied-object", f"{who}:{object_type}:{object_id}",
                             PER_OBJECT).allowed:  # fmt: skip
            return False
        verdict = ratelimit.hit("audit-denied", who, PER_USER)
        if verdict.count > PER_USER.count + 1:
            return False
        detail: dict = {"status": status, "reason": reason}
        if not verdict.allowed:
            detail["further_denials_not_recorded_for_s"] = verdict.retry_after
        user = getattr(request, "user", None)
        with transaction.atomic():  # a savepoint: the request's own work is not touched
            record(
                "access.denied",
                actor=user,
                object_type=object_type,
                object_id=object_id,
                object_repr=f"{request.method} {request.path}"[:200],
                detail=detail,
            )
    except Exception:
        log.exception("audit: recording denied access failed")
        return False
    return True
