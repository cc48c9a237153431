"""The borrowing pass reuses a refusal for a job of the same quota and shape while the
plan's state is unchanged (`borrowing._borrow_or_known_refusal`): property test that the
plan is exactly the plan of trying every job (many same-shaped jobs, so it is reused)."""

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.scheduler import borrowing
from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot
from tests.scheduler.test_plan_properties import snapshots


@st.composite
def queues_of_few_shapes(draw):
    snap = draw(snapshots())
    quotas = len(snap.quotas)
    shapes = [(1, 1), (1, 5), (2, 4), (4, 5)]
    jobs = [
        job(
            j,
            quota=draw(st.integers(1, quotas)),
            workers=(shape := draw(st.sampled_from(shapes)))[0],
            gpus=shape[1],
            priority=draw(st.integers(0, 3)),
            at=draw(st.integers(0, 60)),
            idle=draw(st.sampled_from([IdleResources.ACCEPTABLE, IdleResources.ONLY])),
        )
        for j in range(1, draw(st.integers(2, 40)))
    ]
    return replace(snap, jobs=tuple(jobs))


def plans_reused_and_tried(snap, options):
    now = T0 + timedelta(minutes=120)
    reused = plan(snap, now, options)
    original = borrowing._borrow_or_known_refusal
    borrowing._borrow_or_known_refusal = lambda job, quota, state: borrowing._borrow(
        job, quota, state
    )
    try:
        tried = plan(snap, now, options)
    finally:
        borrowing._borrow_or_known_refusal = original
    return reused, tried


@settings(max_examples=200, deadline=None)
@given(queues_of_few_shapes(), st.sampled_from([0, 3000]))
def test_reused_refusals_give_the_plan_of_trying_every_job(snap, reserve):
    reused, tried = plans_reused_and_tried(snap, PlanOptions(reserve_after_s=reserve))
    assert reused == tried


def test_a_room_given_back_is_a_change_a_reused_refusal_sees():
    """Found by the property above: job 3 (idle only) is refused while the head, job 1,
    keeps 4 GPUs of q0 (it preempts job 100 for the rest); job 1, the same shape, is
    looked at once its room is given back, and must not get job 3's "0 unused"."""
    snap = snapshot(
        nodes=[node(0, free=(1, 2, 3, 4, 5, 6, 7))],
        quotas=[quota(1, name="q0", gpus=6, used=1, preemption="LowerPriority")],
        jobs=[
            job(1, gpus=5, priority=1, idle=IdleResources.ACCEPTABLE),
            job(2, gpus=1, priority=2, idle=IdleResources.ACCEPTABLE),
            job(3, gpus=5, priority=2, idle=IdleResources.ONLY),
        ],
        running=[running(100, on={0: 1}, in_quota=True, priority=0)],
    )
    reused, tried = plans_reused_and_tried(snap, PlanOptions())
    assert reused == tried
    head = next(q for q in reused.queued if q.job_id == 1)
    assert "q0 has 4 unused" in head.reason, head.reason
