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
from tests.scheduler.snaps import T0, job
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


@settings(max_examples=200, deadline=None)
@given(queues_of_few_shapes(), st.sampled_from([0, 3000]))
def test_reused_refusals_give_the_plan_of_trying_every_job(snap, reserve):
    now = T0 + timedelta(minutes=120)
    options = PlanOptions(reserve_after_s=reserve)
    reused = plan(snap, now, options)
    original = borrowing._borrow_or_known_refusal
    borrowing._borrow_or_known_refusal = lambda job, quota, state: borrowing._borrow(
        job, quota, state
    )
    try:
        tried = plan(snap, now, options)
    finally:
        borrowing._borrow_or_known_refusal = original
    assert reused == tried
