"""The roll-up's buckets equal the sum over the pods' intervals, split at hours and at a
charge move, whatever the runs' timing (SQLite and PostgreSQL: run with DATABASE_URL)."""

from datetime import timedelta

import pytest
from django.db.models import Sum

from jobs.models import ChargeMove
from policy.usage_history import FIELDS
from tests.usage.conftest import T0
from usage.actions.rollup import COLUMNS, roll_up_usage
from usage.models import UsageBucket, UsageRollup, UsageTotal

pytestmark = pytest.mark.django_db


def sums(span: str, **filters) -> dict[tuple[int, str], int]:
    rows = (
        UsageBucket.objects.filter(span=span, **filters)
        .values("quota_id")
        .annotate(**{c: Sum(c) for c in COLUMNS})
        .order_by()
    )
    return {
        (row["quota_id"], field): row[f"{field}_us"]
        for row in rows
        for field in FIELDS
        if row[f"{field}_us"]
    }


def test_buckets_equal_the_pods_intervals_across_a_charge_move(history):
    assert ChargeMove.objects.count() == 1
    result = roll_up_usage(now=history["until"])
    assert result.since == T0.replace(minute=0)
    assert sums("h", workspace_id=0) == history["expect"]
    assert sums("d", workspace_id=0) == history["expect"]
    # The (quota, workspace, user) rows add up to the same, less what was lent (a quota's).
    own = {k: v for k, v in history["expect"].items() if k[1] != "lent"}
    detail = sums("h", workspace_id__gt=0)
    assert detail == own


def test_many_small_runs_write_what_one_run_does(history, settings):
    settings.USAGE_ROLLUP_MAX_HOURS = 1
    at = T0
    while at <= history["until"]:
        roll_up_usage(now=at)
        at += timedelta(minutes=17)
    roll_up_usage(now=history["until"])  # catches up to `until`
    many = list(
        UsageBucket.objects.order_by(
            "span", "start", "quota_id", "workspace_id", "user_id"
        ).values()
    )
    UsageBucket.objects.all().delete()
    UsageRollup.objects.all().delete()
    settings.USAGE_ROLLUP_MAX_HOURS = 168
    roll_up_usage(now=history["until"])
    once = list(
        UsageBucket.objects.order_by(
            "span", "start", "quota_id", "workspace_id", "user_id"
        ).values()
    )
    strip = [{k: v for k, v in row.items() if k != "id"} for row in many]
    assert strip == [{k: v for k, v in row.items() if k != "id"} for row in once]


def test_a_second_run_changes_nothing_and_totals_count_final_hours_once(history):
    roll_up_usage(now=history["until"])
    first = sums("h", workspace_id=0)
    again = roll_up_usage(now=history["until"])
    assert sums("h", workspace_id=0) == first
    final_hour = history["until"].replace(minute=0)
    assert again.rolled_until == final_hour  # at 14:40 the hours before 14:00 are final
    totals = {
        (t.quota_id, f): getattr(t, f"{f}_us")
        for t in UsageTotal.objects.all()
        for f in FIELDS
        if getattr(t, f"{f}_us")
    }
    final = sums("h", workspace_id=0, start__lt=final_hour)
    assert totals == final


def test_periodic_runs_are_paced_by_the_last_runs_cost(history, settings):
    # The periodic roll-up (beat's task, the embedded loop) skips while the last run took
    # more than USAGE_ROLLUP_MAX_SHARE of the time since it ran; a direct run never does.
    settings.USAGE_ROLLUP_MAX_SHARE = 0.1
    at = history["until"]
    first = roll_up_usage(now=at, paced=True)
    assert not first.paced and first.buckets
    state = UsageRollup.objects.get(pk=1)
    assert state.ran_at == at and state.last_seconds > 0
    UsageRollup.objects.filter(pk=1).update(last_seconds=30.0)  # as if it had taken 30 s
    UsageBucket.objects.filter(span="h").delete()
    assert roll_up_usage(now=at + timedelta(seconds=299), paced=True).paced
    assert not UsageBucket.objects.filter(span="h").exists()  # skipped: nothing rewritten
    assert not roll_up_usage(now=at + timedelta(seconds=299)).paced  # a direct run runs
    assert UsageBucket.objects.filter(span="h").exists()
    UsageRollup.objects.filter(pk=1).update(last_seconds=30.0, ran_at=at)
    assert not roll_up_usage(now=at + timedelta(seconds=300), paced=True).paced  # 10 % of 300 s
