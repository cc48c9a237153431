"""Job list filters, search and sort: parsed from query parameters, applied to a queryset.

One parser for the job list page and the API (`parse_job_filters(request.GET)`); bad input
raises `jobs.paging.BadPageRequest` naming the parameter, so a page shows the message and
the API returns it in its error shape. Parameters:

    status=Running,Inqueue  state=active|finished  quota=<name or id>
    workspace=<name or id>  owner=<username>|me  idle=<Idle resources mode>
    placement=in_quota|not_in_quota  since=1h|24h|7d|30d  from=YYYY-MM-DD  to=YYYY-MM-DD
    q=<text in the name or command>  name=<text in the name>
    sort=-created|created|-priority|name|-gpus

The API takes the same filters (plus `created_after`/`created_before` date-times) and builds
the same `JobFilters`, so the page and the API can never filter differently.

Every filter is a WHERE clause (or an EXISTS on the job's live workers), so the list stays one
query whatever is asked for.
"""

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from jobs.models import Job, Pod
from jobs.paging import DEFAULT_SORT, SORTS, BadPageRequest, parse_statuses
from policy.statuses import (
    ACTIVE_JOB_STATUSES,
    ACTIVE_POD_STATUSES,
    FINAL_JOB_STATUSES,
    IdleResources,
)

SINCE = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
SINCE["30d"] = timedelta(days=30)
PLACEMENTS = {"in_quota": True, "not_in_quota": False}
STATES = {
    "active": [s.value for s in ACTIVE_JOB_STATUSES],
    "finished": [s.value for s in FINAL_JOB_STATUSES],
}
MAX_SEARCH = 200
_ACTIVE = [s.value for s in ACTIVE_POD_STATUSES]


@dataclass(frozen=True)
class JobFilters:
    statuses: tuple[str, ...] = ()
    state: str = ""  # "active" or "finished"
    quota: str = ""  # a name, or an id
    workspace: str = ""  # a name, or an id
    owner: str = ""  # a username, or "me"
    idle: str = ""
    placement: str = ""  # "in_quota": has a worker In Quota now; "not_in_quota": Not in Quota
    since: str = ""
    created_from: date | None = None
    created_to: date | None = None  # inclusive
    search: str = ""  # in the name or the command
    name: str = ""  # in the name only
    created_after: datetime | None = None  # the API's precise bounds
    created_before: datetime | None = None
    sort: str = DEFAULT_SORT

    def params(self) -> dict[str, str]:
        """The query parameters that give these filters back (pager links, HTMX polls)."""
        values = asdict(self)
        out = {
            "status": ",".join(self.statuses),
            "state": self.state,
            "quota": self.quota,
            "workspace": self.workspace,
            "owner": self.owner,
            "idle": self.idle,
            "placement": self.placement,
            "since": self.since,
            "from": values["created_from"].isoformat() if self.created_from else "",
            "to": values["created_to"].isoformat() if self.created_to else "",
            "q": self.search,
            "name": self.name,
            "created_after": self.created_after.isoformat() if self.created_after else "",
            "created_before": self.created_before.isoformat() if self.created_before else "",
            "sort": "" if self.sort == DEFAULT_SORT else self.sort,
        }
        return {key: value for key, value in out.items() if value}

    @property
    def active(self) -> bool:
        return bool(set(self.params()) - {"sort"})


def _text(params: Mapping[str, str], name: str, limit: int) -> str:
    value = (params.get(name) or "").strip()
    if len(value) > limit:
        raise BadPageRequest(name, f"{name} must be at most {limit} characters.")
    if any(ord(c) < 32 for c in value):
        raise BadPageRequest(name, f"{name} cannot contain control characters.")
    return value


def _day(params: Mapping[str, str], name: str) -> date | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadPageRequest(name, f"{name} must be a date (YYYY-MM-DD).") from None


def _choice(params: Mapping[str, str], name: str, choices) -> str:
    value = (params.get(name) or "").strip()
    if value and value not in choices:
        raise BadPageRequest(name, f"{name} must be one of: {', '.join(choices)}.")
    return value


def parse_job_filters(params: Mapping[str, str]) -> JobFilters:
    """Filters from query parameters; unknown values are a BadPageRequest for that name."""
    created_from, created_to = _day(params, "from"), _day(params, "to")
    if created_from and created_to and created_from > created_to:
        raise BadPageRequest("to", "to must not be before from.")
    return JobFilters(
        statuses=tuple(parse_statuses(params.get("status"))),
        state=_choice(params, "state", list(STATES)),
        quota=_text(params, "quota", 100),
        workspace=_text(params, "workspace", 100),
        owner=_text(params, "owner", 150),
        idle=_choice(params, "idle", [m.value for m in IdleResources]),
        placement=_choice(params, "placement", list(PLACEMENTS)),
        since=_choice(params, "since", list(SINCE)),
        created_from=created_from,
        created_to=created_to,
        search=_text(params, "q", MAX_SEARCH),
        name=_text(params, "name", MAX_SEARCH),
        sort=_choice(params, "sort", list(SORTS)) or DEFAULT_SORT,
    )


def _start_of(day: date) -> datetime:
    from django.utils import timezone

    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def filter_jobs(jobs: QuerySet[Job], filters: JobFilters, *, user, now: datetime) -> QuerySet[Job]:
    """`jobs` narrowed by `filters` (the caller has already limited them to what the user
    may see)."""
    if filters.statuses:
        jobs = jobs.filter(status__in=filters.statuses)
    if filters.state:
        jobs = jobs.filter(status__in=STATES[filters.state])
    if filters.quota:
        jobs = jobs.filter(_by_name_or_id("quota", filters.quota))
    if filters.workspace:
        jobs = jobs.filter(_by_name_or_id("workspace", filters.workspace))
    if filters.owner == "me":
        jobs = jobs.filter(owner=user)
    elif filters.owner:
        jobs = jobs.filter(owner__username=filters.owner)
    if filters.idle:
        jobs = jobs.filter(idle_resources=filters.idle)
    if filters.placement:
        live = Pod.objects.filter(
            job=OuterRef("pk"), status__in=_ACTIVE, in_quota=PLACEMENTS[filters.placement]
        )
        jobs = jobs.filter(Exists(live))
    if filters.since:
        jobs = jobs.filter(created_at__gte=now - SINCE[filters.since])
    if filters.created_from:
        jobs = jobs.filter(created_at__gte=_start_of(filters.created_from))
    if filters.created_to:
        jobs = jobs.filter(created_at__lt=_start_of(filters.created_to + timedelta(days=1)))
    if filters.search:
        jobs = jobs.filter(Q(name__icontains=filters.search) | Q(command__icontains=filters.search))
    if filters.name:
        jobs = jobs.filter(name__icontains=filters.name)
    if filters.created_after:
        jobs = jobs.filter(created_at__gte=filters.created_after)
    if filters.created_before:
        jobs = jobs.filter(created_at__lt=filters.created_before)
    return jobs


def _by_name_or_id(field: str, value: str) -> Q:
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return Q(**{f"{field}_id": int(value)}) | Q(**{f"{field}__name": value})
    return Q(**{f"{field}__name": value})


def _live_gpus(in_quota: bool) -> Coalesce:
    held = (
        Pod.objects.filter(job=OuterRef("pk"), status__in=_ACTIVE, in_quota=in_quota)
        .order_by()
        .values("job")
        .annotate(total=Sum("gpus"))
        .values("total")
    )
    return Coalesce(Subquery(held, output_field=IntegerField()), 0)


def with_live_resources(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Annotate each job's Real-time Resources: GPUs its live workers hold now, In Quota
    (`gpus_in_quota`) and Not in Quota (`gpus_not_in_quota`). Two subqueries per row of the
    page, inside the same SELECT."""
    return jobs.annotate(gpus_in_quota=_live_gpus(True), gpus_not_in_quota=_live_gpus(False))
