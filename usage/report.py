"""Usage history's reports (docs/usage-history.md): who may see which buckets, what a
request asks for, and the rows the Usage page, the API, the CLI and CSV show.

Reads only, a constant number of queries whatever the history's size: one aggregate over
the buckets, one for the names. The quota tree is rolled up by the pure
`policy.usage_history.roll_up_tree` over `quota_parents()`.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.db.models import BigIntegerField, F, Q, Subquery, Sum
from django.db.models.functions import Cast
from django.utils.dateparse import parse_date, parse_datetime

from jobs.access import member_workspace_ids
from jobs.models import Job
from policy.usage_history import roll_up_tree
from protocol import limits
from quotas.access import owned_tenant_ids, visible_quota_ids
from quotas.models import Quota, Workspace
from usage.actions.rollup import COLUMNS
from usage.models import JobUsageBucket, UsageBucket
from usage.query import Epoch, covering, fetch, from_epoch, month_period, pieces, sums

GROUPS = ("quota", "workspace", "user", "gpu_type", "job")
GRANULARITIES = ("hour", "day", "month")
_KEY = {
    "quota": "quota_id",
    "gpu_type": "gpu_type",
    "workspace": "workspace_id",
    "user": "user_id",
    "job": "job_id",
}


class UsageParamError(ValueError):
    """A bad report parameter: the field, a stable code and a message for people."""

    def __init__(self, field: str, code: str, message: str) -> None:
        super().__init__(message)
        self.field, self.code, self.message = field, code, message


@dataclass(frozen=True, slots=True)
class UsageScope:
    """Which buckets a user may read: quota rows of `quota_ids` (None: all), and workspace
    and user rows only of `workspace_ids` too (None: any workspace of those quotas)."""

    quota_ids: frozenset[int] | None
    workspace_ids: frozenset[int] | None


def scope_for(user) -> UsageScope:
    """quotas.access's rule: a researcher sees their workspaces' quotas (and only their
    workspaces' people), a quota owner their tenant, a superuser everything."""
    if not user.is_authenticated:
        return UsageScope(frozenset(), frozenset())
    if user.is_superuser:
        return UsageScope(None, None)
    owned = owned_tenant_ids(user)
    quotas = frozenset(visible_quota_ids(user, owned))
    if owned:
        return UsageScope(quotas, None)
    return UsageScope(
        quotas, frozenset(member_workspace_ids(user).values_list("workspace_id", flat=True))
    )


@dataclass(frozen=True, slots=True)
class UsageRequest:
    group_by: str
    since: datetime
    until: datetime
    granularity: str
    # Per-job rows only (group_by job): the page of jobs, most used first.
    limit: int = limits.USAGE_JOB_ROWS
    offset: int = 0


def _moment(field: str, text: str) -> datetime:
    """An ISO date (midnight UTC) or date-time (UTC when it names no zone)."""
    found = parse_datetime(text) if "T" in text or " " in text else None
    if found is None:
        day = _date(field, text)
        return datetime.combine(day, time(), tzinfo=UTC)
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _date(field: str, text: str) -> date:
    try:
        day = parse_date(text)
    except ValueError:
        day = None
    if day is None:
        raise UsageParamError(field, "invalid_date", f"{field}: use a date such as 2026-11-01.")
    return day


def parse_request(params: Mapping[str, str], now: datetime) -> UsageRequest:
    """The API's and CLI's parameters: group_by, since, until (default: the 30 days to now),
    granularity (default day). Periods are cut to whole hours, or whole UTC days."""
    group_by = params.get("group_by") or "quota"
    if group_by not in GROUPS:
        raise UsageParamError(
            "group_by", "invalid_choice", f"group_by: one of {', '.join(GROUPS)}."
        )
    granularity = params.get("granularity") or "day"
    if granularity not in GRANULARITIES:
        raise UsageParamError(
            "granularity", "invalid_choice", f"granularity: one of {', '.join(GRANULARITIES)}."
        )
    try:
        until = _moment("until", params["until"]) if params.get("until") else now
        since = _moment("since", params["since"]) if params.get("since") else until - timedelta(30)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, UsageParamError):
            raise
        raise UsageParamError("since", "invalid_date", "since/until: not a real date.") from exc
    limit = _count(params, "limit", limits.USAGE_JOB_ROWS, 1, limits.USAGE_JOB_ROWS_MAX)
    offset = _count(params, "offset", 0, 0, limits.USAGE_JOB_OFFSET_MAX)
    return checked(UsageRequest(group_by, since, until, granularity, limit, offset))


def _count(params: Mapping[str, str], field: str, default: int, low: int, high: int) -> int:
    text = params.get(field)
    if text in (None, ""):
        return default
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = low - 1
    if not low <= value <= high:
        raise UsageParamError(field, "invalid_number", f"{field}: a whole number {low}-{high}.")
    return value


def checked(request: UsageRequest) -> UsageRequest:
    """Aligned to the granularity's buckets, and within the limits."""
    span = timedelta(hours=1) if request.granularity == "hour" else timedelta(days=1)
    since, until = _align(request.since, span, up=False), _align(request.until, span, up=True)
    if since >= until:
        raise UsageParamError("until", "invalid_period", "until must be after since.")
    longest = limits.USAGE_HOURLY_DAYS if request.granularity == "hour" else limits.USAGE_DAYS
    if until - since > timedelta(days=longest):
        raise UsageParamError(
            "since", "period_too_long", f"At most {longest} days by {request.granularity}."
        )
    return replace(request, since=since, until=until)


def _align(at: datetime, span: timedelta, *, up: bool) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    steps, rest = divmod(at.astimezone(UTC) - epoch, span)
    return epoch + span * (steps + (1 if up and rest else 0))


@dataclass(slots=True)  # not frozen: a frozen __init__ costs 4x, on thousands of rows
class UsageRow:
    group: str
    group_id: int | str
    start: datetime
    values: tuple[int, ...]  # GPU-microseconds, in policy.usage_history.FIELDS order

    def seconds(self) -> tuple[float, ...]:
        a, b, c, d, e = self.values  # (no generator: thousands of rows per response)
        return (a / 1e6, b / 1e6, c / 1e6, d / 1e6, e / 1e6)


def quota_parents(ids) -> dict[int, int | None]:
    """quota id → parent id: the tree once quotas have a `parent`, flat until then."""
    try:
        Quota._meta.get_field("parent")
    except FieldDoesNotExist:
        return {quota_id: None for quota_id in ids}
    return dict(Quota.objects.values_list("pk", "parent_id"))


def usage_buckets(scope: UsageScope, detail: bool, where: Q, model=UsageBucket):
    """The buckets `where` selects that the scope may read: quota rows, or (detail) the
    (quota, workspace, user) rows."""
    rows = model.objects.filter(where)
    if scope.quota_ids is not None:
        rows = rows.filter(quota_id__in=scope.quota_ids)
    if model is UsageBucket:
        rows = rows.filter(workspace_id=0) if not detail else rows.filter(workspace_id__gt=0)
    if detail and scope.workspace_ids is not None:
        rows = rows.filter(workspace_id__in=scope.workspace_ids)
    return rows


def request_pieces(request: UsageRequest, by_period: bool, coarsest: str = "m") -> list:
    """The bucket ranges a request reads: its own granularity's buckets when rows are per
    period (months pre-rolled where whole), else the fewest that cover the period."""
    if not by_period or request.granularity == "month":
        return pieces(request.since, request.until, coarsest)
    span = "h" if request.granularity == "hour" else "d"
    return [(span, request.since, request.until)]


SUMS = sums(COLUMNS)


def grouped(
    scope: UsageScope,
    request: UsageRequest,
    key: str | None,
    by_period: bool,
    jobs: list[int] | None = None,
):
    """(key?, period as epoch seconds?, five sums) tuples aggregated by the database, one
    query: months of month or day buckets by their month; hours and days as they are. Per
    job (key job_id): the job buckets of `jobs`."""
    if key == "job_id":
        where = covering(request_pieces(request, by_period, coarsest="d"))
        found = usage_buckets(scope, True, where, JobUsageBucket).filter(job_id__in=jobs or [])
    else:
        detail = key in ("workspace_id", "user_id")
        found = usage_buckets(scope, detail, covering(request_pieces(request, by_period)))
    fields = [key] if key else []
    if by_period:
        period = month_period() if request.granularity == "month" else Epoch("start")
        found = found.annotate(period=period)
        fields.append("period")
    return fetch(found.values(*fields).annotate(**SUMS).order_by().values_list(*fields, *SUMS))


def usage_rows(
    scope: UsageScope, request: UsageRequest, parents=None, *, by_period: bool = True
) -> list[UsageRow]:
    """One row per (group, period) with any use (or per group, `start` None, for the whole
    period with `by_period` False), sorted by group name then time."""
    return usage_page(scope, request, parents, by_period=by_period)[0]


def usage_page(
    scope: UsageScope,
    request: UsageRequest,
    parents=None,
    *,
    by_period: bool = True,
    shown: int | None = None,
) -> tuple[list[UsageRow], int | None]:
    """`usage_rows` and the offset of the next page of jobs (None: no more, or not per
    job). Per job: the `limit` most used jobs from `offset` on, most used first. With
    `shown` (whole periods only): most used first, only the first `shown` named (the others
    by id: a page shows those, and its totals count every group)."""
    jobs, more = job_page(scope, request) if request.group_by == "job" else (None, False)
    totals: dict[tuple, list[int]] = {}
    for group, *rest in grouped(scope, request, _KEY[request.group_by], by_period, jobs):
        start = rest.pop(0) if by_period else None
        totals[group, start] = [v or 0 for v in rest]
    if request.group_by == "quota":
        ids = {quota_id for quota_id, _ in totals}
        totals = roll_up_tree(totals, parents if parents is not None else quota_parents(ids))
    if shown is not None and not by_period and jobs is None:
        order = sorted(totals, key=lambda k: (-(totals[k][0] + totals[k][1]), str(k[0])))
        names = group_names(request.group_by, {group for group, _ in order[:shown]})
        rows = [UsageRow(names.get(g, str(g)), g, None, tuple(totals[g, s])) for g, s in order]
        return rows, None
    names = group_names(request.group_by, {group for group, _ in totals})
    starts = {s: from_epoch(s) for s in {s for _, s in totals} if s is not None}
    rows = [
        UsageRow(names.get(g, str(g)), g, starts.get(s), tuple(v)) for (g, s), v in totals.items()
    ]
    if jobs is not None:
        place = {job_id: i for i, job_id in enumerate(jobs)}
        rows.sort(key=lambda r: (place.get(r.group_id, 0), r.start or request.since))
        return rows, request.offset + len(jobs) if more else None
    return sorted(rows, key=lambda r: (r.group, r.start or request.since)), None


def job_page(scope: UsageScope, request: UsageRequest) -> tuple[list[int], bool]:
    """The page of jobs with any use in the period, most GPU-seconds used first (then most
    waited, then id), and whether more follow: one LIMITed query."""
    where = covering(pieces(request.since, request.until, "d"))
    used = Cast(Sum(F("in_quota_us") + F("borrowed_us")), BigIntegerField())
    waited = Cast(Sum("waiting_us"), BigIntegerField())
    found = (
        usage_buckets(scope, True, where, JobUsageBucket)
        .values("job_id")
        .annotate(used=used, waited=waited)
        .order_by("-used", "-waited", "job_id")
        .values_list("job_id", "used", "waited")
    )
    rows = fetch(found[request.offset : request.offset + request.limit + 1])
    return [row[0] for row in rows[: request.limit]], len(rows) > request.limit


def group_names(group_by: str, ids: set) -> dict:
    """Names of a group's ids, one query (GPU types name themselves)."""
    if group_by == "gpu_type" or not ids:
        return {i: i for i in ids}
    if group_by == "quota":
        return dict(Quota.objects.filter(pk__in=ids).values_list("pk", "name"))
    if group_by == "workspace":
        found = Workspace.objects.filter(pk__in=ids).values_list("pk", "tenant__name", "name")
        return {pk: f"{tenant}/{name}" for pk, tenant, name in found}
    if group_by == "job":
        found = Job.objects.filter(pk__in=ids).values_list("pk", "name")
        return {pk: f"{name} (#{pk})" for pk, name in found}
    users = get_user_model().objects.filter(pk__in=ids)
    return dict(users.values_list("pk", "username"))


_ISO: dict[datetime, str] = {}


def _iso(at: datetime) -> str:
    """ "2026-11-01T00:00:00Z", remembered (a response has few distinct periods)."""
    text = _ISO.get(at)
    if text is None:
        if len(_ISO) > 10_000:
            _ISO.clear()
        text = _ISO[at] = at.isoformat().replace("+00:00", "Z")
    return text


def row_json(row: UsageRow) -> dict:
    seconds = row.seconds()
    return {
        "group": row.group,
        "start": _iso(row.start),
        "gpu_seconds_in_quota": seconds[0],
        "gpu_seconds_borrowed": seconds[1],
        "gpu_seconds_lent": seconds[2],
        "gpu_seconds_idle_held": seconds[3],
        "gpu_seconds_waiting": seconds[4],
    }


CSV_HEADER = [
    "group",
    "start",
    "gpu_seconds_in_quota",
    "gpu_seconds_borrowed",
    "gpu_seconds_lent",
    "gpu_seconds_idle_held",
    "gpu_seconds_waiting",
]


def csv_text(rows: list[UsageRow]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for row in rows:
        data = row_json(row)
        writer.writerow([_cell(data[name]) for name in CSV_HEADER])
    return out.getvalue()


def _cell(value) -> str:
    text = str(value)
    # A spreadsheet runs a cell that starts with = + - @ as a formula: names are people's.
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def usage_totals() -> dict[int, list[int]]:
    """quota id → GPU-microseconds of all history (FIELDS order): the final hours' running
    totals plus the hours still open, in one query. What /metrics counts."""
    from usage.models import UsageRollup, UsageTotal

    rolled = UsageRollup.objects.filter(pk=1).values("rolled_until")[:1]
    open_hours = (
        UsageBucket.objects.filter(span="h", workspace_id=0, start__gte=Subquery(rolled))
        .values("quota_id")
        .annotate(**SUMS)
        .order_by()
        .values_list("quota_id", *SUMS)
    )
    final = UsageTotal.objects.values_list("quota_id", *COLUMNS).order_by()
    totals: dict[int, list[int]] = {}
    for quota_id, *values in final.union(open_hours, all=True):
        cell = totals.setdefault(quota_id, [0, 0, 0, 0, 0])
        for i, value in enumerate(values):
            cell[i] += value or 0
    return totals
