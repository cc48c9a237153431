"""Historical fair share (docs/quota-tree.md): borrowers ordered by their borrowed GPUs now
plus their decayed borrowing (`QuotaSnap.history_gpus`), over weight. Pure: plan() and the
decay functions, no database."""

import math
from datetime import timedelta

import pytest

from policy.fair_share import fair_share_rows
from policy.scheduler.plan import plan
from policy.statuses import IdleResources
from policy.usage_history import average_gpus, decayed_gpu_seconds, decayed_on
from tests.scheduler.snaps import T0, job, node, quota, snapshot

ONLY = IdleResources.ONLY
HOUR = timedelta(hours=1)


def two_borrowers(history_a: float, history_b: float, weight_b: float = 1.0):
    """team-a and team-b (no guarantee) each wait with an 8-GPU idle job, team-a's first;
    the lender's 8 GPUs take one of them."""
    quotas = [
        quota(1, name="team-a", gpus=0, history_gpus=history_a),
        quota(2, name="team-b", gpus=0, history_gpus=history_b, weight=weight_b),
        quota(3, name="lender", gpus=8),
    ]
    jobs = [job(10, quota=1, gpus=8, idle=ONLY, at=0), job(20, quota=2, gpus=8, idle=ONLY, at=5)]
    return plan(snapshot([node(0)], quotas, jobs), T0 + timedelta(minutes=10))


@pytest.mark.parametrize(
    ("history_a", "history_b", "weight_b", "first"),
    [
        (0.0, 0.0, 1.0, 10),  # no history: the older job, as without fair share
        (3.0, 0.0, 1.0, 20),  # team-a borrowed recently: team-b first, though it came later
        (3.0, 1.0, 1.0, 20),
        (1.0, 3.0, 1.0, 10),
        (2.0, 3.0, 2.0, 20),  # team-b's weight 2 halves its 3: 1.5 < 2
    ],
)
def test_the_quota_with_less_decayed_borrowing_borrows_first(history_a, history_b, weight_b, first):
    result = two_borrowers(history_a, history_b, weight_b)
    assert [a.job_id for a in result.admissions] == [first]
    assert result.admissions[0].charged_quota_id == 3


def test_history_and_borrowing_now_add_up():
    """team-a borrows 4 GPUs now and has no history; team-b has 3 GPUs of history: team-b
    (3) goes before team-a (4)."""
    quotas = [
        quota(1, name="team-a", gpus=0, used=0),
        quota(2, name="team-b", gpus=0, history_gpus=3.0),
        quota(3, name="lender", gpus=12, used=4, borrowed_gpus=4),
    ]
    from tests.scheduler.snaps import running

    held = running(99, on={0: 4}, quota=1, charged=3, in_quota=False)
    jobs = [job(10, quota=1, gpus=8, idle=ONLY, at=0), job(20, quota=2, gpus=8, idle=ONLY, at=5)]
    nodes = [node(0, free=(4, 5, 6, 7)), node(1)]
    result = plan(snapshot(nodes, quotas, jobs, [held]), T0 + timedelta(minutes=10))
    assert [a.job_id for a in result.admissions] == [20]


def test_decay_of_a_constant_load_is_its_closed_form():
    """2 GPUs for 30 days, buckets of an hour: exactly 2 x h/ln2 x (1 - 2^(-T/h))."""
    half_life = 7 * 24 * 3600
    now = T0 + timedelta(days=30)
    buckets = [(T0 + HOUR * i, T0 + HOUR * (i + 1), 2 * 3600 * 10**6) for i in range(30 * 24)]
    got = decayed_gpu_seconds(buckets, now, half_life)
    span = 30 * 24 * 3600
    expected = 2 * half_life / math.log(2) * (1 - 2 ** (-span / half_life))
    assert math.isclose(got, expected, rel_tol=1e-9)
    # As average GPUs: the load, less what fell out of the window (30 days, ~4.3 half-lives).
    assert math.isclose(average_gpus(got, half_life), 2 * (1 - 2 ** (-30 / 7)), rel_tol=1e-9)
    # One half-life later, with nothing borrowed meanwhile: half.
    later = now + timedelta(seconds=half_life)
    assert math.isclose(decayed_on(got, now, later, half_life), got / 2)
    assert math.isclose(decayed_gpu_seconds(buckets, later, half_life), got / 2, rel_tol=1e-9)


def test_older_use_weighs_less_and_an_open_bucket_counts_to_now():
    h = 3600.0
    recent = decayed_gpu_seconds([(T0, T0 + HOUR, 3600 * 10**6)], T0 + HOUR, h)
    old = decayed_gpu_seconds([(T0, T0 + HOUR, 3600 * 10**6)], T0 + 5 * HOUR, h)
    assert old < recent / 8
    half = decayed_gpu_seconds([(T0, T0 + HOUR, 1800 * 10**6)], T0 + HOUR / 2, h)
    assert 1200 < half < 1800  # 30 minutes of 1 GPU, barely decayed
    assert decayed_gpu_seconds([(T0, T0 + HOUR, 0)], T0 + HOUR, h) == 0


def test_the_pages_ranking_is_the_schedulers_order():
    now = T0
    seconds = 3 * 168 * 3600 / math.log(2)  # 3 GPUs on average over a week's half-life
    rows = fair_share_rows(
        [
            (1, "team-a", 1, 1.0, 0, 168, seconds, now),
            (2, "team-b", 1, 1.0, 1, 168, None, None),
            (3, "team-c", 1, 2.0, 4, 168, None, None),
            (4, "other", 2, 1.0, 0, 168, None, None),
        ],
        now,
    )
    by_name = {r.name: r for r in rows}
    assert math.isclose(by_name["team-a"].history_gpus, 3.0)
    assert [r.name for r in rows if r.tenant_id == 1] == ["team-b", "team-c", "team-a"]
    assert [by_name[n].rank for n in ("team-b", "team-c", "team-a", "other")] == [1, 2, 3, 1]
