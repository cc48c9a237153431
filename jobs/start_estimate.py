"""When could a waiting job start? A conservative estimate from what is known for sure.

A waiting job needs its quota's guaranteed capacity: the GPUs its quota's guaranteed
workers hold now, minus those that will certainly be free by a given time, must leave
room for it and for every job ahead of it in the queue. Only a running job with a max
runtime has a known latest end (its start plus the limit); lent GPUs count as free (the
quota reclaims them on demand). So the estimate is "no later than", and there is none when
the capacity it waits for is held by jobs that may run forever. Placement on nodes is not
modelled: the reason the scheduler gives says when that is what a job waits for.
(`estimate` is pure; `expected_start` loads its inputs.)
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q, Sum

from jobs.models import Job, Pod
from jobs.statuses import ACTIVE_POD_STATUSES, FINAL_JOB_STATUSES, IdleResources
from jobs.usage import WAITING, usage_of


@dataclass(frozen=True)
class Estimate:
    at: datetime | None
    basis: str


def estimate(
    *,
    now: datetime,
    size: int,
    held: int,
    need: int,
    ahead: int,
    releases: list[tuple[datetime | None, int]],
) -> Estimate:
    """`held` GPUs of a `size`-GPU quota are in guaranteed use; `ahead` GPUs are wanted by
    earlier jobs; `releases` are (latest end or None, GPUs) of the holders."""
    if need > size:
        return Estimate(None, f"the job needs {need} GPUs; its quota has {size}")
    free = size - held
    wanted = ahead + need
    if free >= wanted:
        return Estimate(now, "the quota has room now; waiting for the scheduler or a node")
    for end, gpus in sorted((r for r in releases if r[0] is not None), key=lambda r: r[0]):
        free += gpus
        if free >= wanted:
            return Estimate(
                max(end, now),
                "when running jobs reach their max runtime, the quota has room "
                f"for this job and the {ahead} GPUs queued ahead of it",
            )
    unknown = sum(gpus for end, gpus in releases if end is None)
    return Estimate(
        None,
        f"{unknown} of the GPUs it waits for are held by jobs without a max runtime",
    )


def expected_start(job: Job, now: datetime) -> Estimate:
    if job.status not in WAITING:
        if job.started_at is not None:
            return Estimate(job.started_at, "started")
        if job.status in FINAL_JOB_STATUSES:
            return Estimate(None, f"the job is {job.status}; it will not start")
        return Estimate(now, "placed; its workers are starting")
    if job.idle_resources == IdleResources.ONLY:
        return Estimate(None, "it runs only on idle GPUs: it starts when a lender has some free")
    quota = job.quota
    usage = usage_of([quota])[quota.pk]
    ahead = _ahead_gpus(job)
    holders = (
        Pod.objects.filter(
            charged_quota_id=quota.pk,
            in_quota=True,
            job__quota_id=quota.pk,
            status__in=[s.value for s in ACTIVE_POD_STATUSES],
        )
        .values("job_id", "job__started_at", "job__max_runtime_seconds")
        .annotate(gpus=Sum("gpus"))
    )
    releases = []
    for row in holders:
        started, limit = row["job__started_at"], row["job__max_runtime_seconds"]
        end = started + timedelta(seconds=limit) if started and limit else None
        releases.append((end, row["gpus"] or 0))
    return estimate(
        now=now,
        size=usage.size,
        held=usage.in_quota,
        need=job.total_gpus,
        ahead=ahead,
        releases=releases,
    )


def _ahead_gpus(job: Job) -> int:
    """GPUs wanted by the quota's waiting jobs that the scheduler admits first."""
    earlier = Q(priority__gt=job.priority) | Q(priority=job.priority, created_at__lt=job.created_at)
    if job.queue_position is not None:
        earlier = Q(queue_position__lt=job.queue_position)
    total = (
        Job.objects.filter(quota_id=job.quota_id, status__in=WAITING)
        .exclude(pk=job.pk)
        .filter(earlier)
        .aggregate(gpus=Sum(F("workers") * F("gpus_per_worker")))["gpus"]
    )
    return total or 0
