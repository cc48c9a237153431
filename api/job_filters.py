"""The job list's query: its parameters (filters, sort, page) and the jobs they select,
for `GET /api/v1/jobs` (docs/README.md's API)."""

import re
from datetime import UTC, datetime

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from pydantic import Field

from api import schemas
from jobs.access import visible_jobs
from jobs.filters import PLACEMENTS, SINCE, JobFilters, filter_jobs, with_live_resources
from jobs.models import Job
from jobs.paging import DEFAULT_SORT, MAX_PAGE, SORTS, BadPageRequest, parse_statuses
from policy.statuses import IdleResources

DATE_TIME = {"format": "date-time"}


class ListParams(schemas.Schema):
    status: str | None = Field(
        None, description="Comma-separated statuses, e.g. Pending,Inqueue.", max_length=200
    )
    state: str | None = Field(
        None, description="active or finished.", json_schema_extra={"enum": ["active", "finished"]}
    )
    quota: str | None = Field(None, description="Quota name or id.", max_length=200)
    workspace: str | None = Field(None, description="Workspace name or id.", max_length=200)
    owner: str | None = Field(None, description='A username, or "me".', max_length=150)
    name: str | None = Field(None, description="Part of the job name.", max_length=200)
    q: str | None = Field(None, description="Part of the job name or command.", max_length=200)
    idle: str | None = Field(
        None,
        description="Idle Resources mode.",
        json_schema_extra={"enum": [m.value for m in IdleResources]},
    )
    placement: str | None = Field(
        None,
        description="Jobs with a worker In Quota, or Not in Quota, now.",
        json_schema_extra={"enum": list(PLACEMENTS)},
    )
    since: str | None = Field(
        None, description="Submitted in the last …", json_schema_extra={"enum": list(SINCE)}
    )
    sort: str | None = Field(None, description="Order.", json_schema_extra={"enum": list(SORTS)})
    created_after: str | None = Field(
        None, description="RFC 3339, e.g. 2026-03-01T12:00:00Z.", json_schema_extra=DATE_TIME
    )
    created_before: str | None = Field(None, json_schema_extra=DATE_TIME)
    cursor: str | None = Field(None, max_length=200, description="next_cursor of a page.")
    limit: int = Field(50, ge=1, le=MAX_PAGE)


RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def _moment(value: str | None, name: str) -> datetime | None:
    """An RFC 3339 date-time (with its offset), strictly: numbers and bare dates are not."""
    if value is None:
        return None
    try:
        if not RFC3339.fullmatch(value):
            raise ValueError(value)
        # In UTC: RFC 3339 allows offsets up to ±23:59, PostgreSQL only ±15:59.
        return datetime.fromisoformat(value.replace("z", "Z")).astimezone(UTC)
    except (ValueError, OverflowError):
        raise BadPageRequest(
            name, f"{name} must be an RFC 3339 date-time with an offset."
        ) from None


def filtered_jobs(request: HttpRequest, params: ListParams) -> tuple[QuerySet[Job], str]:
    """The page's filters (jobs.filters), from the API's typed parameters."""
    for name, choices in (
        ("state", ("active", "finished")),
        ("idle", [m.value for m in IdleResources]),
        ("placement", list(PLACEMENTS)),
        ("since", list(SINCE)),
        ("sort", list(SORTS)),
    ):
        value = getattr(params, name)
        if value is not None and value not in choices:
            raise BadPageRequest(name, f"{name} must be one of: {', '.join(choices)}.")
    filters = JobFilters(
        statuses=tuple(parse_statuses(params.status)),
        state=params.state or "",
        quota=(params.quota or "").strip(),
        workspace=(params.workspace or "").strip(),
        owner=(params.owner or "").strip(),
        idle=params.idle or "",
        placement=params.placement or "",
        since=params.since or "",
        search=(params.q or "").strip(),
        name=(params.name or "").strip(),
        created_after=_moment(params.created_after, "created_after"),
        created_before=_moment(params.created_before, "created_before"),
        sort=params.sort or DEFAULT_SORT,
    )
    jobs = filter_jobs(visible_jobs(request.user), filters, user=request.user, now=timezone.now())
    return with_live_resources(jobs), filters.sort
