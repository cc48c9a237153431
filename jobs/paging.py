"""Keyset pagination of job lists, newest first (stays fast at any depth, unlike OFFSET)."""

import base64
import binascii
from datetime import datetime

from django.db.models import Q, QuerySet

from jobs.models import Job
from jobs.statuses import JobStatus

DEFAULT_PAGE = 50
MAX_PAGE = 200


class BadPageRequest(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def encode_cursor(job: Job) -> str:
    raw = f"{job.created_at.isoformat()}|{job.pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, pk = raw.split("|", 1)
        value = datetime.fromisoformat(created), int(pk)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadPageRequest("cursor", "The cursor is not one this API returned.") from None
    if value[0].tzinfo is None:
        raise BadPageRequest("cursor", "The cursor is not one this API returned.")
    return value


def parse_limit(raw: str | None, default: int = DEFAULT_PAGE) -> int:
    if raw in (None, ""):
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise BadPageRequest("limit", "limit must be an integer.") from None
    if not 1 <= limit <= MAX_PAGE:
        raise BadPageRequest("limit", f"limit must be between 1 and {MAX_PAGE}.")
    return limit


def parse_statuses(raw: str | None) -> list[str]:
    """`?status=Running` or `?status=Pending,Inqueue`; unknown names are an error."""
    if not raw:
        return []
    names = [part.strip() for part in raw.split(",") if part.strip()]
    valid = {s.value.lower(): s.value for s in JobStatus}
    unknown = [n for n in names if n.lower() not in valid]
    if unknown:
        raise BadPageRequest(
            "status",
            f"Unknown status {unknown[0]!r}; use one of {', '.join(s.value for s in JobStatus)}.",
        )
    return [valid[n.lower()] for n in names]


def page_of_jobs(
    jobs: QuerySet[Job], *, cursor: str | None, limit: int
) -> tuple[list[Job], str | None]:
    """One page of `jobs` newest first, and the cursor of the next page (None at the end)."""
    jobs = jobs.order_by("-created_at", "-pk")
    if cursor:
        created, pk = decode_cursor(cursor)
        jobs = jobs.filter(Q(created_at__lt=created) | Q(created_at=created, pk__lt=pk))
    rows = list(jobs[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], encode_cursor(rows[limit - 1])
    return rows, None
