"""Quota usage as researchers see it: size, used, lent, borrowed, and the queue.

Counted from live workers (the charge is on each pod, DESIGN §5), in a constant number of
queries for any number of quotas:

- used: GPUs charged to the quota by its own jobs;
- lent: GPUs charged to it by other quotas' idle jobs (reclaimable when it needs them);
- borrowed: GPUs its own idle jobs use in other quotas;
- queue: its waiting jobs (Pending, Inqueue) and their GPUs.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, F, Q, Sum

from jobs.models import Job, Pod
from jobs.statuses import ACTIVE_POD_STATUSES, JobStatus

WAITING = [JobStatus.PENDING.value, JobStatus.INQUEUE.value]


@dataclass
class Usage:
    size: int = 0
    used: int = 0
    in_quota: int = 0  # the guaranteed part of `used` (what a waiting job competes with)
    lent: int = 0
    borrowed: int = 0
    waiting: int = 0
    waiting_gpus: int = 0

    @property
    def free(self) -> int:
        return max(self.size - self.used - self.lent, 0)

    def as_dict(self) -> dict:
        return {
            "size": self.size,
            "used": self.used,
            "lent": self.lent,
            "borrowed": self.borrowed,
            "free": self.free,
        }


def usage_of(quotas: Iterable) -> dict[int, Usage]:
    """Usage of each quota (two aggregate queries)."""
    result = {q.pk: Usage(size=q.gpus) for q in quotas}
    if not result:
        return result
    ids = list(result)
    live = [s.value for s in ACTIVE_POD_STATUSES]
    charged = (
        Pod.objects.filter(status__in=live)
        .filter(Q(charged_quota_id__in=ids) | Q(job__quota_id__in=ids))
        .values("charged_quota_id", "in_quota", own=F("job__quota_id"))
        .annotate(gpus=Sum("gpus"))
    )
    for row in charged:
        gpus = row["gpus"] or 0
        here, own = row["charged_quota_id"], row["own"]
        if here == own and here in result:
            result[here].used += gpus
            if row["in_quota"]:
                result[here].in_quota += gpus
        else:
            if here in result:
                result[here].lent += gpus
            if own in result:
                result[own].borrowed += gpus
    waiting = (
        Job.objects.filter(quota_id__in=ids, status__in=WAITING)
        .values("quota_id")
        .annotate(jobs=Count("pk"), gpus=Sum(F("workers") * F("gpus_per_worker")))
    )
    for row in waiting:
        result[row["quota_id"]].waiting = row["jobs"]
        result[row["quota_id"]].waiting_gpus = row["gpus"] or 0
    return result


def waiting_jobs(quota_id: int):
    """The quota's waiting jobs in the scheduler's order (priority, then submit time)."""
    return (
        Job.objects.filter(quota_id=quota_id, status__in=WAITING)
        .select_related("workspace", "owner")
        .order_by(F("queue_position").asc(nulls_last=True), "-priority", "created_at", "pk")
    )


def my_positions(quota_ids: list[int], user) -> dict[int, list[int]]:
    """Queue positions of the user's waiting jobs per quota."""
    positions: dict[int, list[int]] = defaultdict(list)
    rows = (
        Job.objects.filter(quota_id__in=quota_ids, status__in=WAITING, owner=user)
        .exclude(queue_position__isnull=True)
        .order_by("queue_position")
        .values_list("quota_id", "queue_position")
    )
    for quota_id, position in rows:
        positions[quota_id].append(position)
    return positions
