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
from policy.usage_chart import covered_seconds, gpu_hours, guarantee_hours, share_percent
from policy.usage_history import BORROWED, IN_QUOTA, LENT
from protocol import limits
from quotas.models import Quota
from usage.models import UsageBucket, UsageRollup
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


def _periods(request: UsageRequest) -> tuple[list[datetime], timedelta]:
    step = timedelta(hours=1) if request.granularity == "hour" else timedelta(days=1)
    count = int((request.until - request.since) / step)
    return [request.since + step * i for i in range(count)], step


def history_horizon(now: datetime) -> datetime:
    """Up to when the history is written: the last roll-up's run, never after now (before
    any roll-up: now, the history is empty)."""
    ran_at = UsageRollup.objects.filter(pk=1).values_list("ran_at", flat=True).first()
    return min(ran_at or now, now)


def chart_series(scope: UsageScope, request: UsageRequest, now: datetime) -> dict:
    """uPlot data (console.js): use against guarantee for the quotas shown, and the whole
    cluster's utilisation (held and idle-held share of its GPUs), per hour or day; buckets
    not covered yet are None, the current one counts its covered part (policy.usage_chart)."""
    periods, step = _periods(request)
    covered = covered_seconds(periods, step, history_horizon(now))
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
    guaranteed = quotas.aggregate(g=Sum("gpus"))["g"] or 0
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
    held, idle = defaultdict(int), defaultdict(int)
    for period, h, i in fetch(cluster):
        held[from_epoch(period)], idle[from_epoch(period)] = h or 0, i or 0
    cluster_gpus = Node.objects.aggregate(g=Sum("gpus"))["g"] or 0
    t = [int(p.timestamp()) for p in periods]
    whole = step.total_seconds()
    used_hours = gpu_hours([used[p] for p in periods], covered, whole)
    lent_hours = gpu_hours([lent[p] for p in periods], covered, whole)
    guarantee = guarantee_hours(guaranteed, covered, whole)
    return {
        "guarantee": {
            "t": t,
            "series": [
                {"label": "Used (GPU-hours)", "values": used_hours},
                {"label": "Guarantee (GPU-hours)", "values": guarantee},
                {"label": "Lent (GPU-hours)", "values": lent_hours},
            ],
        },
        "cluster": {
            "t": t,
            "series": [
                {
                    "label": "Held (% of cluster GPUs)",
                    "values": share_percent([held[p] for p in periods], cluster_gpus, covered),
                },
                {
                    "label": "Held but idle (%)",
                    "values": share_percent([idle[p] for p in periods], cluster_gpus, covered),
                },
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
