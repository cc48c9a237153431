"""Usage history in the API (docs/usage-history.md): GPU-seconds per quota, workspace,
user or GPU type and per hour, day or month, as JSON or CSV. The same rows as the Usage
page (`usage.report`), under the same access rule."""

from typing import Literal

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from ninja import Field, Query, Router

from accounts.api_auth import ApiError
from api import schemas
from api.jobs import READ_ERRORS
from api.parsing import reject_unknown_query
from usage.report import (
    UsageParamError,
    csv_text,
    parse_request,
    row_json,
    scope_for,
    usage_page,
)

router = Router()


class UsageParams(schemas.Schema):
    group_by: Literal["quota", "workspace", "user", "gpu_type", "job"] = "quota"
    since: str | None = Field(
        None,
        description="ISO date or date-time (UTC); default 30 days before `until`.",
        max_length=40,
    )
    until: str | None = Field(
        None, description="ISO date or date-time (UTC); default now.", max_length=40
    )
    granularity: Literal["hour", "day", "month"] = "day"
    format: Literal["json", "csv"] = "json"
    limit: int | None = Field(
        None, description="group_by=job: jobs per page (default 100, at most 1000)."
    )
    offset: int | None = Field(None, description="group_by=job: jobs skipped (most used first).")


class UsageRowOut(schemas.Schema):
    group: str
    start: str = Field(json_schema_extra={"format": "date-time"})
    gpu_seconds_in_quota: float
    gpu_seconds_borrowed: float
    gpu_seconds_lent: float
    gpu_seconds_idle_held: float
    gpu_seconds_waiting: float


class UsageList(schemas.Schema):
    group_by: str
    granularity: str
    since: str = Field(json_schema_extra={"format": "date-time"})
    until: str = Field(json_schema_extra={"format": "date-time"})
    rows: list[UsageRowOut]
    next_offset: int | None = Field(
        None, description="group_by=job: the offset of the next page of jobs; null at the end."
    )


_CSV = {"responses": {200: {"content": {"text/csv": {"schema": {"type": "string"}}}}}}


def _iso(at) -> str:
    return at.isoformat().replace("+00:00", "Z")


@router.get(
    "/usage",
    response={200: UsageList, **READ_ERRORS},
    url_name="usage",
    summary="Usage history: GPU-seconds in quota, borrowed, lent, idle-held and waiting",
    openapi_extra=_CSV,
)
def usage(request: HttpRequest, params: Query[UsageParams]):
    """Rows per group and period (`format=csv` for a spreadsheet). Periods are cut to whole
    hours (granularity hour, at most 31 days) or whole UTC days (at most 400). Per job
    (`group_by=job`): a page of `limit` jobs from `offset`, most used first."""
    reject_unknown_query(request, UsageParams)
    asked = {k: str(v) for k, v in params.dict().items() if v is not None}
    try:
        wanted = parse_request(asked, timezone.now())
    except UsageParamError as exc:
        raise ApiError(400, "validation_error", exc.message, exc.field) from None
    rows, next_offset = usage_page(scope_for(request.user), wanted)
    if params.format == "csv":
        response = HttpResponse(csv_text(rows), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="usage.csv"'
        return response
    # Serialised directly: the schema above documents it, and validating thousands of rows
    # through it costs more than the query (bench/usage.py).
    return JsonResponse(
        {
            "group_by": wanted.group_by,
            "granularity": wanted.granularity,
            "since": _iso(wanted.since),
            "until": _iso(wanted.until),
            "rows": [row_json(row) for row in rows],
            "next_offset": next_offset,
        }
    )
