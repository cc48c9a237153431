"""/metrics counters of usage history, and the pure roll-up over the quota tree (a quota
move re-parents its history; its own buckets do not change)."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.usage_history import (
    PodSpan,
    bucket_cells,
    idle_spans,
    roll_up_tree,
    split_hours,
    subtree_of,
    waiting_spans,
)
from quotas.models import Quota
from tests.console.test_metrics import metrics_token, scrape, value  # noqa: F401
from usage.actions.rollup import roll_up_usage

H = datetime(2026, 11, 2, tzinfo=UTC)


@pytest.mark.django_db
def test_metrics_count_the_same_gpu_seconds(history, metrics_token):  # noqa: F811
    roll_up_usage(now=history["until"])
    samples = scrape()
    team_a = Quota.objects.get(name="team-a").pk
    for kind in ("in_quota", "borrowed", "idle_held", "waiting"):
        expected = history["expect"][team_a, kind] / 1e6
        assert (
            value(samples, "gpu_console_quota_gpu_seconds_total", quota="team-a", kind=kind)
            == expected
        )
    lent = value(samples, "gpu_console_quota_gpu_seconds_total", quota="team-b", kind="lent")
    assert lent == 3 * 90 * 60
    roll_up_usage(now=history["until"] + timedelta(hours=3))  # the running pod goes on
    later = value(scrape(), "gpu_console_quota_gpu_seconds_total", quota="team-a", kind="in_quota")
    assert later == history["expect"][team_a, "in_quota"] / 1e6 + 3 * 3 * 3600


def test_a_quota_move_changes_the_roll_up_not_the_quotas_own_numbers():
    totals = {(3, H): [10, 1, 0, 2, 5], (2, H): [7, 0, 4, 0, 0], (1, H): [1, 0, 0, 0, 0]}
    before = roll_up_tree(totals, {1: None, 2: 1, 3: 2, 4: None})
    assert before[1, H] == [18, 1, 4, 2, 5] and before[2, H] == [17, 1, 4, 2, 5]
    after = roll_up_tree(totals, {1: None, 2: 1, 3: 4, 4: None})  # 3 moves under 4
    assert after[1, H] == [8, 0, 4, 0, 0] and after[4, H] == [10, 1, 0, 2, 5]
    assert before[3, H] == after[3, H] == totals[3, H]
    flat = roll_up_tree(totals, {1: None, 2: None, 3: None})
    assert flat == totals
    assert subtree_of({1: 2, 2: 1}) == {1: {1, 2}, 2: {1, 2}}  # a cycle never loops


times = st.integers(min_value=0, max_value=5 * 3600 * 10**6).map(
    lambda us: H + timedelta(microseconds=us)
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spans=st.lists(
        st.tuples(times, times, st.lists(times, max_size=3), st.integers(1, 8)), max_size=6
    ),
)
def test_cells_of_any_pods_sum_to_their_intervals(spans):
    pods, expected = [], {}
    for a, b, moves, gpus in spans:
        start, end = min(a, b), max(a, b)
        cuts = sorted(m for m in moves if start < m < end)
        charges = ((start, 1), *((at, 2 if i % 2 == 0 else 1) for i, at in enumerate(cuts)))
        pods.append(PodSpan(1, 7, 9, gpus, start, end, charges))
        bounds = [start, *cuts, end]
        for i in range(len(bounds) - 1):
            us = (bounds[i + 1] - bounds[i]) // timedelta(microseconds=1) * gpus
            field = "in" if charges[i][1] == 1 else "borrowed"
            expected[field] = expected.get(field, 0) + us
    cells = bucket_cells(pods, [], [], H, H + timedelta(hours=6))
    got_in = sum(v[0] for (h, q, w, u), v in cells.items() if (q, w) == (1, 0))
    got_borrowed = sum(v[1] for (h, q, w, u), v in cells.items() if (q, w) == (1, 0))
    got_lent = sum(v[2] for (h, q, w, u), v in cells.items() if (q, w) == (2, 0))
    assert got_in == expected.get("in", 0)
    assert got_borrowed == got_lent == expected.get("borrowed", 0)
    detail = sum(v[0] + v[1] for (h, q, w, u), v in cells.items() if w == 7)
    assert detail == got_in + got_borrowed


def test_hours_waits_and_idle_samples():
    parts = list(
        split_hours(H + timedelta(minutes=30), H + timedelta(hours=2), H, H + timedelta(hours=5))
    )
    assert parts == [
        (H, 1800 * 10**6),
        (H + timedelta(hours=1), 3600 * 10**6),
    ]
    events = [
        (H, "Pending"),
        (H + timedelta(minutes=1), "Inqueue"),
        (H + timedelta(minutes=9), "Starting"),
        (H + timedelta(hours=1), "Pending"),
    ]
    waits = list(waiting_spans(events, frozenset({"Pending", "Inqueue"}), H + timedelta(hours=2)))
    assert waits == [
        (H, H + timedelta(minutes=9)),
        (H + timedelta(hours=1), H + timedelta(hours=2)),
    ]
    m = timedelta(minutes=1)
    samples = [
        (H, 0),
        (H + m, 3),
        (H + 2 * m, 50),
        (H + 3 * m, 0),
        (H + 20 * m, 0),
        (H + 21 * m, None),
    ]
    assert list(idle_spans(samples, 5, timedelta(minutes=5))) == [(H, H + m)]
