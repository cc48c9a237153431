"""Historical fair share's input (docs/quota-tree.md): each quota's borrowed GPU-seconds
decayed over its tenant's half-life, written by the usage roll-up (usage.actions.rollup) for
the tenants that turned it on, and read by the scheduler's snapshot in the same query as
the quotas (one row per quota; the snapshot decays it on to the cycle's `now`).

Read from the buckets: hours for the last two days, days before that, back ten half-lives
(at most the retention): a bucket older than that weighs less than 0.1 %.
"""

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from policy.usage_history import HOUR, ceil_hour, decayed_gpu_seconds
from quotas.actions import replace_decayed_usage
from quotas.models import Quota
from usage.models import UsageBucket
from usage.query import DAY

HOURLY = timedelta(days=2)  # the newest history is read hour by hour
HORIZON_HALF_LIVES = 10


def _horizon(half_life_h: int) -> timedelta:
    longest = timedelta(days=settings.USAGE_RETENTION_DAYS)
    return min(timedelta(hours=half_life_h * HORIZON_HALF_LIVES), longest)


def write_decayed_usage(now: datetime) -> int:
    """Replace every quota's decayed borrowed GPU-seconds as of `now` (two queries to read,
    one delete, one insert). Returns the rows written."""
    quotas = {
        pk: half_life
        for pk, half_life in Quota.objects.filter(tenant__historical_fair_share=True).values_list(
            "pk", "tenant__fair_share_half_life_hours"
        )
    }
    if not quotas:
        return replace_decayed_usage([], now)
    top = ceil_hour(now)
    split = top - HOURLY
    oldest = split - max(_horizon(h) for h in quotas.values())
    where = Q(span="h", start__gte=split, start__lt=top) | Q(
        span="d", start__gte=oldest.replace(hour=0), start__lt=split.replace(hour=0)
    )
    # The day that `split` falls in is read by the hour (the hours after it) and by the
    # hours before it: its day bucket is left out and its early hours read too.
    where |= Q(span="h", start__gte=split.replace(hour=0), start__lt=split)
    found = UsageBucket.objects.filter(
        where, workspace_id=0, quota_id__in=list(quotas), borrowed_us__gt=0
    ).values_list("quota_id", "span", "start", "borrowed_us")
    buckets: dict[int, list] = defaultdict(list)
    for quota_id, span, start, borrowed in found:
        buckets[quota_id].append((start, start + (HOUR if span == "h" else DAY), borrowed))
    rows = {
        quota_id: decayed_gpu_seconds(
            (b for b in buckets.get(quota_id, ()) if b[0] >= now - _horizon(half_life)),
            now,
            half_life * 3600,
        )
        for quota_id, half_life in quotas.items()
    }
    return replace_decayed_usage(rows.items(), now)
