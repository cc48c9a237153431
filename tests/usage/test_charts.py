"""The Usage page's charts over time: a bucket the history does not cover yet is None (the
chart leaves the future blank, never a 0), and the bucket now is in counts only its covered
part (a cluster busy for the 40 minutes of an hour so far is busy, not two thirds idle)."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from cluster.models import Node
from policy.usage_chart import covered_seconds, gpu_hours, guarantee_hours, share_percent
from quotas.models import Quota
from usage.actions.rollup import roll_up_usage

pytestmark = pytest.mark.django_db

H0 = datetime(2026, 11, 2, tzinfo=UTC)
HOUR = timedelta(hours=1)
US_PER_HOUR = 3600 * 1_000_000


@pytest.mark.parametrize(
    ("horizon", "covered"),
    [
        (H0, [None, None, None]),  # nothing written yet
        (H0 + timedelta(minutes=40), [2400.0, None, None]),
        (H0 + HOUR, [3600.0, None, None]),  # the first hour whole, the next not begun
        (H0 + timedelta(hours=1, seconds=1), [3600.0, 1.0, None]),
        (H0 + timedelta(hours=5), [3600.0, 3600.0, 3600.0]),  # all in the past
    ],
)
def test_covered_seconds_of_three_hours(horizon, covered):
    assert covered_seconds([H0, H0 + HOUR, H0 + 2 * HOUR], HOUR, horizon) == covered


def test_covered_seconds_of_days():
    days = [H0, H0 + timedelta(days=1)]
    now = H0 + timedelta(hours=6)
    assert covered_seconds(days, timedelta(days=1), now) == [6 * 3600.0, None]


@pytest.mark.parametrize(
    ("used", "gpus", "covered", "hours", "guarantee", "share"),
    [
        # 8 GPUs busy for the 40 minutes so far: 100 %, not 67 % (nor 11 % of a day), and
        # 8 GPU-hours an hour at that pace against a guarantee of 8.
        (8 * 2400 * 10**6, 8, 2400.0, 8.0, 8.0, 100.0),
        (8 * 3600 * 10**6, 8, 3600.0, 8.0, 8.0, 100.0),
        (2 * 3600 * 10**6, 8, 3600.0, 2.0, 8.0, 25.0),
        (1 * 1800 * 10**6, 8, 3600.0, 0.5, 8.0, 6.25),  # one GPU for half of a past hour
        (0, 8, 3600.0, 0.0, 8.0, 0.0),  # covered and unused: a real 0
        (0, 8, None, None, None, None),  # not covered: blank
        (5, 0, 3600.0, 0.0, 0.0, None),  # no GPUs: no share of them
    ],
)
def test_a_buckets_numbers_over_its_covered_part(used, gpus, covered, hours, guarantee, share):
    assert gpu_hours([used], [covered], 3600.0) == [hours]
    assert guarantee_hours(gpus, [covered], 3600.0) == [guarantee]
    assert share_percent([used], gpus, [covered]) == [share]


def test_a_days_bucket_is_per_day():
    six_hours = 6 * 3600.0  # a day 6 hours old, 2 GPUs busy all along: 48 a day at that pace
    assert gpu_hours([2 * 6 * 3600 * 10**6], [six_hours], 86400.0) == [48.0]
    assert guarantee_hours(2, [six_hours, None], 86400.0) == [48.0, None]


def _charts(user, day: str) -> dict:
    client = Client()
    client.force_login(user)
    response = client.get("/usage/charts/", {"period": "day", "date": day})
    assert response.status_code == 200
    return response.json()


def test_the_day_chart_leaves_the_future_blank_and_counts_the_hour_so_far(
    history, researcher, node
):
    until = history["until"]  # 14:40: the borrower's 3 GPUs run, nothing else
    roll_up_usage(now=until)
    cluster_gpus = sum(Node.objects.values_list("gpus", flat=True))
    guaranteed = Quota.objects.get(name="team-a").gpus
    for later in (timedelta(seconds=30), timedelta(minutes=10)):  # the roll-up lags a bit
        with time_machine.travel(until + later, tick=False):
            charts = _charts(researcher, "2026-11-02")
        used, guarantee, _lent = (s["values"] for s in charts["guarantee"]["series"])
        held, _idle = (s["values"] for s in charts["cluster"]["series"])
        assert len(charts["guarantee"]["t"]) == 24
        assert held[15:] == [None] * 9 and used[15:] == [None] * 9 and guarantee[15:] == [None] * 9
        assert None not in held[:15] + used[:15]
        # 14:00-14:40 (the history's horizon, even ten minutes later): 3 GPUs busy.
        assert held[14] == round(100 * 3 / cluster_gpus, 2)
        assert used[14] == 3.0  # 3 GPUs x 40 minutes: 3 GPU-hours an hour at that pace
        assert guarantee[14] == guarantee[13] == guaranteed
    with time_machine.travel(until, tick=False):
        yesterday = _charts(researcher, "2026-11-01")
    assert all(None not in s["values"] for s in yesterday["cluster"]["series"])


def test_a_future_day_is_blank(history, researcher, node):
    roll_up_usage(now=history["until"])
    with time_machine.travel(history["until"], tick=False):
        charts = _charts(researcher, "2026-11-03")
    for chart in ("guarantee", "cluster"):
        assert all(set(s["values"]) == {None} for s in charts[chart]["series"])
