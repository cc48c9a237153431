"""A job's decision reused for its twins behind it (`policy.scheduler.twins`): property tests
that the plan is exactly the plan of looking at every job, on queues full of twins (flat
quotas and quota trees with every sharing option), and that a long queue of twins is mostly
reused."""

import importlib
from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot
from tests.scheduler.test_plan_borrow_refusals import queues_of_few_shapes
from tests.scheduler.test_sharing_properties import EXAMPLES, SLOW, trees_with_work

plan_module = importlib.import_module("policy.scheduler.plan")
NOW = T0 + timedelta(minutes=120)


def plans_with_and_without_twins(snap, options, now=NOW):
    reused = plan(snap, now, options)
    original = plan_module.twin_key
    plan_module.twin_key = lambda *args: None  # every job looked at
    try:
        looked = plan(snap, now, options)
    finally:
        plan_module.twin_key = original
    return reused, looked


@st.composite
def with_twins(draw, base):
    """Each waiting job of `base` with up to four twins behind it (the same quota, priority,
    shape and setting; later submissions), some of them with something of their own: live
    pods of an earlier attempt, excluded nodes, a recent reclaim, a longer wait."""
    snap = draw(base)
    node_ids = [n.id for n in snap.nodes]
    quota_ids = [q.id for q in snap.quotas]
    jobs, next_id = [], 1000
    for original in snap.jobs:
        jobs.append(original)
        for k in range(draw(st.integers(0, 4))):
            twin = replace(
                original, id=next_id, submitted_at=original.submitted_at + timedelta(seconds=k)
            )
            next_id += 1
            own = draw(st.sampled_from(["", "", "", "pods", "excluded", "reclaimed", "since"]))
            if own == "pods":
                twin = replace(twin, active_pods=1)
            elif own == "excluded":
                twin = replace(twin, excluded_node_ids=frozenset({draw(st.sampled_from(node_ids))}))
            elif own == "reclaimed":
                by = draw(st.sampled_from(quota_ids))
                twin = replace(twin, reclaimed_by=((by, NOW - timedelta(seconds=30)),))
            elif own == "since":
                twin = replace(
                    twin, waiting_since=NOW - timedelta(minutes=draw(st.integers(0, 90)))
                )
            jobs.append(twin)
    return replace(snap, jobs=tuple(jobs))


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(with_twins(queues_of_few_shapes()), st.sampled_from([0, 3000]))
def test_twins_get_the_plan_of_looking_at_every_job(snap, reserve):
    reused, looked = plans_with_and_without_twins(snap, PlanOptions(reserve_after_s=reserve))
    assert reused == looked


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SLOW)
@given(with_twins(trees_with_work(waiting_jobs=(1, 6))), st.sampled_from([0, 300]))
def test_twins_in_quota_trees_get_the_plan_of_looking_at_every_job(snap, min_runtime):
    """Trees, lending limits, fair-share and within-tree preemption, every preemption policy
    in quota (`LowerOrNewerEqualPriority` reads the job's submission time)."""
    options = PlanOptions(min_runtime_before_reclaim_s=min_runtime, reserve_after_s=1800)
    reused, looked = plans_with_and_without_twins(snap, options, T0 + timedelta(hours=1))
    assert reused == looked


def test_a_long_queue_of_twins_is_looked_at_once_per_decision(monkeypatch):
    """2,000 waiting jobs of four keys on a full quota that lent its GPUs out: the 1,500 that
    may borrow are looked at about once per key and pass, the rest reused (an `Off` job's
    look is always made: it is one check); the plan is the plan of looking at each."""
    made = []

    class Counted(plan_module.Twins):
        def __init__(self):
            super().__init__()
            made.append(self)

    monkeypatch.setattr(plan_module, "Twins", Counted)
    shapes = [(1, 1, IdleResources.ACCEPTABLE), (2, 4, IdleResources.OFF),
              (1, 8, IdleResources.ONLY), (1, 2, IdleResources.ACCEPTABLE)]  # fmt: skip
    jobs = [
        job(i, workers=w, gpus=g, idle=idle, at=i % 60, quota=1 + i % 2)
        for i in range(1, 2001)
        for w, g, idle in [shapes[i % 4]]
    ]
    snap = snapshot(
        nodes=[node(n, free=()) for n in range(4)],
        quotas=[
            quota(1, name="q1", gpus=16, used=16, borrowed_gpus=8, preemption="LowerPriority"),
            quota(2, name="q2", gpus=16, used=16),
        ],
        jobs=jobs,
        running=[
            running(100, on={0: 8}, quota=2, charged=1, in_quota=False, started=100),
            running(101, on={1: 8}, quota=1, charged=1, in_quota=True),
            running(102, on={2: 8}, quota=2, charged=2, in_quota=True),
            running(103, on={3: 8}, quota=2, charged=2, in_quota=True),
        ],
    )
    reused, looked = plans_with_and_without_twins(snap, PlanOptions())
    assert reused == looked
    assert len(reused.queued) == 2000
    # Both passes: 1,500 jobs each, three keys: two looks per key and pass (a few more where
    # the first looks changed the plan: a room kept, a preemption decided), the rest reused.
    assert 2 * 1500 - 20 <= made[0].reused < 2 * 1500, made[0].reused


def test_every_job_kept_waiting_by_a_protected_borrower_says_so_and_none_holds():
    """Found by the tree property above: the second of two same-shaped jobs got the
    remembered "no victims" without its words, said "1/1 GPU in use" and held its quota
    (the starvation rule); the first said who is kept and held nothing. Now both alike."""
    children = [(2, "q2", 4), (3, "q3", 2), (4, "q4", 1)]
    lent = [quota(i, name=n, gpus=g, used=g, borrowed_gpus=g, parent_id=1) for i, n, g in children]
    snap = snapshot(
        nodes=[node(1, free=(7,))],
        quotas=[quota(1, name="q1", gpus=7), *lent],
        jobs=[job(1, quota=4, priority=0), job(2, quota=4, priority=0)],
        # q1's jobs borrow all of its children's guarantees; q4 reclaims lower priorities only.
        running=[
            running(100 + i, on={1: g}, quota=1, charged=i, priority=0) for i, _, g in children
        ],
    )
    snap = replace(
        snap, quotas=tuple(replace(q, reclaim_within_tree="LowerPriority") for q in snap.quotas)
    )
    result = plan(snap, T0 + timedelta(hours=1), PlanOptions(reserve_after_s=0))
    reasons = [q.reason for q in result.queued]
    assert len(reasons) == 2 and reasons[0] == reasons[1], reasons
    assert "kept: borrower of q1 has priority 0, not below 0" in reasons[0], reasons


def test_a_starvation_wait_longer_than_the_calendar_holds_nothing():
    """`reserve_after_s` is turned into the moment jobs have waited long since: one too
    large for a date means no job has waited so long, not a crashed plan."""
    snap = snapshot(
        nodes=[node(1, free=())],
        quotas=[quota(1, name="q1", gpus=8, used=8)],
        jobs=[job(1, gpus=8, idle=IdleResources.ACCEPTABLE), job(2, gpus=1)],
    )
    result = plan(snap, NOW, PlanOptions(reserve_after_s=1e18))
    assert [q.job_id for q in result.queued] == [1, 2]
