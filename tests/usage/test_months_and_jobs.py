"""Pre-rolled month buckets and per-job buckets keep the exactness invariant: they add up to
the pods' intervals, across a charge move (SQLite and PostgreSQL: run with DATABASE_URL);
a period is read as the fewest buckets that cover it exactly."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum
from hypothesis import given
from hypothesis import strategies as st

from policy.usage_history import FIELDS
from tests.usage.test_rollup import sums
from usage.actions.rollup import COLUMNS, roll_up_usage
from usage.models import JobUsageBucket, UsageBucket
from usage.query import pieces


@pytest.mark.django_db
def test_month_buckets_equal_the_pods_intervals(history):
    roll_up_usage(now=history["until"])
    assert sums("m", workspace_id=0) == history["expect"]
    (month,) = set(UsageBucket.objects.filter(span="m").values_list("start", flat=True))
    assert month == datetime(2026, 11, 1, tzinfo=UTC)
    assert sums("m", workspace_id__gt=0) == sums("h", workspace_id__gt=0)


@pytest.mark.django_db
def test_job_buckets_add_up_to_the_people_rows_per_job(history):
    roll_up_usage(now=history["until"])
    own = {k: v for k, v in history["expect"].items() if k[1] != "lent"}
    for span in ("h", "d"):
        rows = (
            JobUsageBucket.objects.filter(span=span)
            .values("quota_id")
            .annotate(**{c: Sum(c) for c in COLUMNS})
            .order_by()
        )
        got = {(r["quota_id"], f): r[f"{f}_us"] for r in rows for f in FIELDS if r[f"{f}_us"]}
        assert got == own
    trainer, borrower, waiter = history["jobs"]
    per_job = dict(
        JobUsageBucket.objects.filter(span="d")
        .values("job_id")
        .annotate(b=Sum("borrowed_us"))
        .values_list("job_id", "b")
    )
    assert per_job[borrower.pk] == 3 * 90 * 60 * 10**6  # borrowed until its charge moved home
    assert per_job[trainer.pk] == per_job[waiter.pk] == 0


@pytest.mark.django_db
def test_a_rerun_months_later_rewrites_only_its_months(history):
    roll_up_usage(now=history["until"])
    first = sums("m", workspace_id=0)
    roll_up_usage(now=history["until"] + timedelta(minutes=5))
    again = sums("m", workspace_id=0)
    team_a = next(q for q, f in first if f == "borrowed")
    # The borrower runs on (in quota since its move): five minutes more, nothing else.
    assert again[team_a, "in_quota"] - first[team_a, "in_quota"] == 3 * 5 * 60 * 10**6
    assert {k: v for k, v in again.items() if k[1] != "in_quota"} == {
        k: v for k, v in first.items() if k[1] != "in_quota"
    }


T = datetime(2025, 1, 1, tzinfo=UTC)
hours = st.integers(min_value=0, max_value=24 * 800).map(lambda h: T + timedelta(hours=h))


@given(a=hours, b=hours)
def test_pieces_cover_the_period_once_with_aligned_buckets(a, b):
    since, until = min(a, b), max(a, b)
    found = pieces(since, until)
    covered, at = timedelta(), since
    for span, lo, hi in found:
        assert lo == at and lo < hi  # in order, no gap, no overlap
        at = hi
        covered += hi - lo
        if span == "m":
            assert lo.day == hi.day == 1 and lo.hour == hi.hour == 0
        if span == "d":
            assert lo.hour == hi.hour == 0
    assert covered == until - since and at == until
    assert sum(1 for s, _, _ in found if s == "h") <= 2


@pytest.mark.django_db
def test_a_quota_move_re_parents_its_history_and_the_roots_still_add_up(
    history, quota, other_quota, workspace
):
    """team-b moves under team-a after the history was rolled up: its buckets are unchanged,
    team-a's row becomes its subtree's, and the root's row is every pod's GPU-seconds."""
    from quotas.models import Role
    from tests.api.conftest import client_for
    from tests.conftest import make_user

    roll_up_usage(now=history["until"])
    before = set(
        UsageBucket.objects.values_list("span", "start", "quota_id", "in_quota_us", "lent_us")
    )
    owner = client_for(make_user("olga", workspace, role=Role.QUOTA_OWNER))
    asked = {"since": "2026-11-01", "until": "2026-12-01", "granularity": "month"}
    flat = {r["group"]: r for r in owner.get("/api/v1/usage", asked).json()["rows"]}
    type(other_quota).objects.filter(pk=other_quota.pk).update(parent=quota)
    moved = {r["group"]: r for r in owner.get("/api/v1/usage", asked).json()["rows"]}
    assert (
        set(UsageBucket.objects.values_list("span", "start", "quota_id", "in_quota_us", "lent_us"))
        == before
    )
    assert moved["team-b"] == flat["team-b"]
    expect = history["expect"]
    for field in ("in_quota", "borrowed", "lent", "idle_held", "waiting"):
        whole = sum(v for (q, f), v in expect.items() if f == field) / 1e6
        assert moved["team-a"][f"gpu_seconds_{field}"] == whole
