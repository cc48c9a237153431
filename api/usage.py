"""Quota usage and queues as the API shows them, from the scheduler's own numbers.

Every number comes from `policy.accounting.account` over the snapshot `plan()` itself uses
(`jobs.forecast.current_snapshot`), like the dashboard and the Quotas page: what a
researcher reads is what the scheduler decides on.
"""

from collections import defaultdict

from django.db.models import F

from jobs.models import Job
from policy.accounting import QuotaUsage
from policy.statuses import WAITING_JOB_STATUSES


def usage_json(usage: QuotaUsage | None, size: int) -> dict:
    """The API's quota usage: `used` is every GPU charged to the quota (what counts against
    its size, the scheduler's number), split into its own in-quota jobs, its own idle jobs
    and other quotas' idle jobs (lent, reclaimable); `borrowed` is what its jobs use of
    other quotas."""
    if usage is None:  # a quota the snapshot does not know (created this instant)
        return {"size": size, "used": 0, "in_quota": 0, "idle_own": 0, "lent": 0,
                "borrowed": 0, "free": size, "starved": False, "own": size,
                "subtree_used": 0, "subtree_lent": 0, "subtree_borrowed": 0}  # fmt: skip
    return {
        "size": usage.size,
        "used": usage.used,
        "in_quota": usage.in_quota,
        "idle_own": usage.idle_own,
        "lent": usage.lent,
        "borrowed": usage.borrowed,
        "free": usage.free,
        "starved": usage.starved,
        # The tree's roll-up (docs/quota-tree.md "Accounting"); a flat quota's equal its own.
        "own": usage.own,
        "subtree_used": usage.subtree_used,
        "subtree_lent": usage.subtree_lent,
        "subtree_borrowed": usage.subtree_borrowed,
    }


def waiting_jobs(quota_id: int):
    """The quota's waiting jobs in the scheduler's order (priority, then submit time)."""
    return (
        Job.objects.filter(quota_id=quota_id, status__in=WAITING_JOB_STATUSES)
        .select_related("workspace", "owner")
        .order_by(F("queue_position").asc(nulls_last=True), "-priority", "created_at", "pk")
    )


def my_positions(quota_ids: list[int], user) -> dict[int, list[int]]:
    """Queue positions of the user's waiting jobs per quota."""
    positions: dict[int, list[int]] = defaultdict(list)
    rows = (
        Job.objects.filter(quota_id__in=quota_ids, status__in=WAITING_JOB_STATUSES, owner=user)
        .exclude(queue_position__isnull=True)
        .order_by("queue_position")
        .values_list("quota_id", "queue_position")
    )
    for quota_id, position in rows:
        positions[quota_id].append(position)
    return positions


def waiting_gpus(quota_ids: list[int]) -> dict[int, tuple[int, int]]:
    """quota id → (waiting jobs, their GPUs)."""
    from django.db.models import Count, Sum

    rows = (
        Job.objects.filter(quota_id__in=quota_ids, status__in=WAITING_JOB_STATUSES)
        .values("quota_id")
        .annotate(jobs=Count("pk"), gpus=Sum(F("workers") * F("gpus_per_worker")))
    )
    return {r["quota_id"]: (r["jobs"], r["gpus"] or 0) for r in rows}
