"""`policy.quota_preview` (pure): the change applied to a copy, the diff of two plans, the jobs
above a new guarantee, the state token (docs/quota-tree.md "Owner pages")."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from policy.quota_preview import (
    NEW_QUOTA_ID,
    QuotaEdit,
    apply_edit,
    only_pool,
    preview,
    state_token,
)
from policy.scheduler.model import JobSnap, NodeSnap, QuotaSnap, RunningSnap, Snapshot

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
POOL = ("Lingjun", "H200")


def node(i: int, free: int = 8, gpu_type: str = "H200") -> NodeSnap:
    return NodeSnap(i, f"n{i}", gpu_type, "Lingjun", tuple(range(8 - free, 8)), 8, 64, 512)


def quota(i: int, gpus: int, used: int = 0, lent: int = 0, **kw) -> QuotaSnap:
    return QuotaSnap(
        i, f"q{i}", 1, "Lingjun", kw.pop("gpu_type", "H200"), gpus, used, borrowed_gpus=lent, **kw
    )


def running(i: int, quota_id: int, gpus: int, *, charged: int | None = None, priority=0):
    return RunningSnap(
        i,
        quota_id,
        charged or quota_id,
        charged is None,
        priority,
        ((1, gpus),),
        started_at=NOW - timedelta(hours=1),
        name=f"r{i}",
    )


def waiting(i: int, quota_id: int, gpus: int) -> JobSnap:
    return JobSnap(i, quota_id, 1, gpus, 1, 1, 0, NOW - timedelta(minutes=i), name=f"w{i}")


def test_apply_edit_changes_a_copy_adds_and_deletes():
    snap = Snapshot(quotas=(quota(1, 8), quota(2, 4, parent_id=1)))
    grown = apply_edit(snap, QuotaEdit(1, {"gpus": 12, "weight": 2.0, "bogus": 1}))
    assert [q.gpus for q in grown.quotas] == [12, 4] and grown.quotas[0].weight == 2.0
    assert snap.quotas[0].gpus == 8  # the snapshot itself is untouched
    added = apply_edit(snap, QuotaEdit(None, {"name": "new", "gpus": 2, "parent_id": 1}))
    assert added.quotas[-1].id == NEW_QUOTA_ID and added.quotas[-1].parent_id == 1
    assert [q.id for q in apply_edit(snap, QuotaEdit(2, {}, delete=True)).quotas] == [1]


def test_a_grow_lets_a_waiting_job_start_and_a_shrink_stops_one_starting():
    snap = Snapshot(nodes=(node(1),), quotas=(quota(1, 2),), jobs=(waiting(10, 1, 4),))
    grown = preview(snap, QuotaEdit(1, {"gpus": 4}), NOW)
    assert [e.job_id for e in grown.started] == [10] and not grown.not_started
    fits = replace(snap, quotas=(quota(1, 4),))
    shrunk = preview(fits, QuotaEdit(1, {"gpus": 2}), NOW)
    assert [e.job_id for e in shrunk.not_started] == [10] and not shrunk.started
    assert "quota q1" in shrunk.not_started[0].detail


def test_jobs_above_a_new_guarantee_borrowers_first():
    snap = Snapshot(
        nodes=(node(1, free=2),),
        quotas=(quota(1, 8, used=6, lent=2), quota(2, 0)),
        running=(running(20, 1, 4), running(21, 2, 2, charged=1)),
    )
    result = preview(snap, QuotaEdit(1, {"gpus": 3}), NOW)
    (over,) = result.over
    assert (over.quota, over.charged, over.own_before, over.own_after) == ("q1", 6, 8, 3)
    assert [e.job_id for e in over.jobs] == [21, 20]
    assert "reclaimed when q1's jobs need them" in over.jobs[0].detail
    assert "keeps running" in over.jobs[1].detail
    # Down to 4: the borrower alone is above it.
    assert [e.job_id for e in preview(snap, QuotaEdit(1, {"gpus": 4}), NOW).over[0].jobs] == [21]
    assert preview(snap, QuotaEdit(1, {"gpus": 6}), NOW).over == ()


def test_a_new_child_carves_its_parents_own_guarantee():
    snap = Snapshot(quotas=(quota(1, 8, used=6),), running=(running(20, 1, 6),))
    edit = QuotaEdit(
        None,
        {"name": "kid", "gpus": 4, "parent_id": 1, "resource_type": "Lingjun", "gpu_type": "H200"},
    )
    result = preview(snap, edit, NOW)
    assert [(o.quota, o.before, o.after) for o in result.own] == [("q1", 8, 4), ("kid", 0, 4)]
    assert [e.job_id for e in result.over[0].jobs] == [20]
    assert not result.quiet


def test_only_the_edited_pool_is_planned():
    snap = Snapshot(
        nodes=(node(1), node(2, gpu_type="A100")),
        quotas=(quota(1, 8), quota(2, 8, gpu_type="A100")),
        jobs=(waiting(10, 1, 1), waiting(11, 2, 1)),
    )
    assert only_pool(snap, POOL).jobs == (waiting(10, 1, 1),)
    result = preview(snap, QuotaEdit(1, {"gpus": 0}), NOW)
    assert [e.job_id for e in result.not_started] == [10]


def test_the_token_moves_with_quotas_and_running_jobs_not_with_the_queue():
    snap = Snapshot(nodes=(node(1),), quotas=(quota(1, 8),), running=(running(20, 1, 2),))
    token = state_token(snap, POOL)
    assert state_token(replace(snap, jobs=(waiting(10, 1, 1),)), POOL) == token
    assert state_token(replace(snap, running=()), POOL) != token
    assert state_token(replace(snap, quotas=(quota(1, 9),)), POOL) != token
    other = replace(snap, quotas=(*snap.quotas, quota(2, 1, gpu_type="A100")))
    assert state_token(other, POOL) == token


def test_a_limit_below_what_is_held_or_lent_is_named():
    snap = Snapshot(
        nodes=(node(1, free=2),),
        quotas=(quota(1, 8, used=6, lent=2), quota(2, 0)),
        running=(running(20, 1, 4), running(21, 2, 2, charged=1)),
    )
    result = preview(snap, QuotaEdit(1, {"max_gpus": 3, "lending_limit": 1}), NOW)
    assert result.limits == (
        "The jobs of q1's subtree hold 4 GPUs, above the new limit of 3: they keep running, "
        "and none of its jobs starts until they hold less.",
        "2 GPUs of q1's subtree are lent out, above the new lending limit of 1: the borrowers "
        "keep running; nothing more is lent until they end or are reclaimed.",
    )
    assert preview(snap, QuotaEdit(1, {"max_gpus": 8, "lending_limit": 2}), NOW).limits == ()
