"""What the Usage page shows beyond the rows (docs/usage-history.md): the period picker's
form, per-group totals, top users, and the charts' series. Reads only, constant queries."""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from django import forms
from django.db.models import BigIntegerField, F, Sum
from django.db.models.functions import Cast

from cluster.models import Node
from policy.usage_history import BORROWED, IN_QUOTA, LENT
from protocol import limits
from quotas.models import Quota
from usage.models import UsageBucket
from usage.query import Epoch, covering, fetch, from_epoch, pieces
from usage.report import (
    GROUPS,
    UsageParamError,
    UsageRequest,
    UsageRow,
    UsageScope,
    checked,
    group_names,
    grouped,
    usage_buckets,
)

PERIODS = ("day", "week", "month", "custom")
HOUR_US = 3600 * 1_000_000


class UsageForm(forms.Form):
    period = forms.ChoiceField(choices=[(p, p.title()) for p in PERIODS], required=False)
    date = forms.DateField(required=False, label="Day in the period")
    since = forms.DateField(required=False, label="From (custom)")
    until = forms.DateField(required=False, label="To, inclusive (custom)")
    group = forms.ChoiceField(
        choices=[(g, g.replace("_", " ").title()) for g in GROUPS], required=False
    )
    page = forms.IntegerField(required=False, min_value=1, max_value=10_000)

    def usage_request(self, today: dt.date) -> UsageRequest | None:
        """The period asked for (UTC days), or None with the field errors added."""
        data = self.cleaned_data
        period, group = data.get("period") or "week", data.get("group") or "quota"
        anchor = data.get("date") or today
        if period == "custom":
            if not data.get("since") or not data.get("until"):
                self.add_error("since", "A custom period needs both dates.")
                return None
            first, last = data["since"], data["until"]
        elif period == "day":
            first = last = anchor
        elif period == "week":
            first, last = anchor - timedelta(days=6), anchor
        else:
            first = anchor.replace(day=1)
            last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
        days = (last - first).days + 1
        granularity = "hour" if days <= 7 else "day"
        since = datetime.combine(first, time(), tzinfo=UTC)
        try:
            size = limits.USAGE_JOB_ROWS
            offset = ((data.get("page") or 1) - 1) * size
            wanted = UsageRequest(
                group, since, since + timedelta(days=days), granularity, size, offset
            )
            return checked(wanted)
        except (UsageParamError, OverflowError) as exc:
            message = getattr(exc, "message", "Not a period the reports cover.")
            self.add_error("until" if period == "custom" else "date", message)
            return None


@dataclass(frozen=True, slots=True)
class GroupTotal:
    group: str
    hours: tuple[float, ...]  # GPU-hours in FIELDS order

    @property
    def used(self) -> float:
        return self.hours[IN_QUOTA] + self.hours[BORROWED]

    @property
    def cells(self) -> tuple[str, ...]:
        """The hours to one decimal (formatted here: a template filter per cell was a
        measurable part of the page, bench/usage.py)."""
        return tuple(f"{h:.1f}" for h in self.hours)


def group_totals(rows: list[UsageRow], ordered: bool = False) -> list[GroupTotal]:
    """Each group's whole period, most used first (`ordered`: in the rows' order)."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for row in rows:
        for i, value in enumerate(row.values):
            sums[row.group][i] += value
    totals = [GroupTotal(g, tuple(round(v / HOUR_US, 2) for v in s)) for g, s in sums.items()]
    return totals if ordered else sorted(totals, key=lambda t: (-t.used, t.group))


def top_users(scope: UsageScope, request: UsageRequest) -> list[GroupTotal]:
    """The users whose jobs used the most GPU-hours in the period (two queries)."""
    found = (
        usage_buckets(scope, True, covering(pieces(request.since, request.until)))
        .values("user_id")
        .annotate(used=Sum(F("in_quota_us") + F("borrowed_us")), idle=Sum("idle_held_us"))
        .order_by("-used", "user_id")[: limits.USAGE_TOP_USERS]
    )
    found = list(found)
    names = group_names("user", {r["user_id"] for r in found})
    return [
        GroupTotal(
            names.get(r["user_id"], str(r["user_id"])),
            (
                round((r["used"] or 0) / HOUR_US, 2),
                0.0,
                0.0,
                round((r["idle"] or 0) / HOUR_US, 2),
                0.0,
            ),
        )
        for r in found
    ]


def _periods(request: UsageRequest) -> list[datetime]:
    step = timedelta(hours=1) if request.granularity == "hour" else timedelta(days=1)
    count = int((request.until - request.since) / step)
    return [request.since + step * i for i in range(count)]


def chart_series(scope: UsageScope, request: UsageRequest) -> dict:
    """uPlot data (console.js): use against guarantee for the quotas shown, and the whole
    cluster's utilisation (held and idle-held share of its GPUs), per hour or day."""
    periods = _periods(request)
    seconds = (periods[1] - periods[0]).total_seconds() if len(periods) > 1 else 3600.0
    used, lent = defaultdict(int), defaultdict(int)
    for epoch, *values in grouped(scope, request, None, by_period=True):
        start = from_epoch(epoch)
        used[start] += (values[IN_QUOTA] or 0) + (values[BORROWED] or 0)
        lent[start] += values[LENT] or 0
    quotas = (
        Quota.objects.all()
        if scope.quota_ids is None
        else Quota.objects.filter(pk__in=scope.quota_ids)
    )
    guarantee = (quotas.aggregate(g=Sum("gpus"))["g"] or 0) * seconds / 3600
    cluster = (
        UsageBucket.objects.filter(
            span="h" if request.granularity == "hour" else "d",
            start__gte=request.since,
            start__lt=request.until,
            workspace_id=0,
        )
        .annotate(period=Epoch("start"))
        .values("period")
        .annotate(
            held=Cast(Sum(F("in_quota_us") + F("borrowed_us")), BigIntegerField()),
            idle=Cast(Sum("idle_held_us"), BigIntegerField()),
        )
        .order_by()
        .values_list("period", "held", "idle")
    )
    by_start = {from_epoch(p): {"held": h, "idle": i} for p, h, i in fetch(cluster)}
    capacity = (Node.objects.aggregate(g=Sum("gpus"))["g"] or 0) * seconds * 1_000_000
    t = [int(p.timestamp()) for p in periods]

    def share(key: str) -> list[float | None]:
        if not capacity:
            return [None for _ in periods]
        return [round(100 * ((by_start.get(p) or {}).get(key) or 0) / capacity, 2) for p in periods]

    gpu_hours = [round(used[p] / HOUR_US, 2) for p in periods]
    return {
        "guarantee": {
            "t": t,
            "series": [
                {"label": "Used (GPU-hours)", "values": gpu_hours},
                {"label": "Guarantee (GPU-hours)", "values": [round(guarantee, 2)] * len(periods)},
                {
                    "label": "Lent (GPU-hours)",
                    "values": [round(lent[p] / HOUR_US, 2) for p in periods],
                },
            ],
        },
        "cluster": {
            "t": t,
            "series": [
                {"label": "Held (% of cluster GPUs)", "values": share("held")},
                {"label": "Held but idle (%)", "values": share("idle")},
            ],
        },
        "live": False,
    }


def totals_of(rows: list[UsageRow]) -> tuple[float, ...]:
    sums = [0, 0, 0, 0, 0]
    for row in rows:
        for i, value in enumerate(row.values):
            sums[i] += value
    return tuple(round(v / HOUR_US, 2) for v in sums)
