"""Job list filters (status, quota, workspace, owner, name, submit time), as plain values
and one function that applies them, so the list page and the API filter the same way."""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Q, QuerySet

from jobs.models import Job
from jobs.paging import BadPageRequest
from jobs.statuses import ACTIVE_JOB_STATUSES, FINAL_JOB_STATUSES, JobStatus


@dataclass(frozen=True)
class JobFilters:
    statuses: tuple[str, ...] = ()
    quota: str = ""  # name or id
    workspace: str = ""  # name or id
    owner: str = ""  # username, or "me"
    name: str = ""  # part of the job name (case-insensitive)
    state: str = ""  # "active" or "finished"
    created_after: datetime | None = None
    created_before: datetime | None = None


def _by_name_or_id(field: str, value: str) -> Q:
    value = value.strip()
    if value.isdigit() and len(value) <= 18:
        return Q(**{f"{field}_id": int(value)}) | Q(**{f"{field}__name": value})
    return Q(**{f"{field}__name": value})


def apply_filters(jobs: QuerySet[Job], filters: JobFilters, user) -> QuerySet[Job]:
    """`jobs` narrowed by `filters` (the caller has already limited it to what the user
    may see)."""
    if filters.statuses:
        jobs = jobs.filter(status__in=list(filters.statuses))
    if filters.state == "active":
        jobs = jobs.filter(status__in=[s.value for s in ACTIVE_JOB_STATUSES])
    elif filters.state == "finished":
        jobs = jobs.filter(status__in=[s.value for s in FINAL_JOB_STATUSES])
    elif filters.state:
        raise BadPageRequest("state", "state must be active or finished.")
    if filters.quota:
        jobs = jobs.filter(_by_name_or_id("quota", filters.quota))
    if filters.workspace:
        jobs = jobs.filter(_by_name_or_id("workspace", filters.workspace))
    if filters.owner:
        owner = filters.owner.strip()
        jobs = jobs.filter(owner=user) if owner == "me" else jobs.filter(owner__username=owner)
    if filters.name:
        jobs = jobs.filter(name__icontains=filters.name.strip())
    if filters.created_after:
        jobs = jobs.filter(created_at__gte=_aware(filters.created_after))
    if filters.created_before:
        jobs = jobs.filter(created_at__lt=_aware(filters.created_before))
    return jobs


def _aware(moment: datetime) -> datetime:
    """A time without a zone is read as UTC (the console's zone)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


STATUS_NAMES = [s.value for s in JobStatus]
