"""Property (docs/quota-tree.md, "move before preempting"): a guaranteed job whose quota's
guarantee is only lent out, beside free GPUs that could host it, while every borrower in
its way could be moved to another lender, starts in the first plan: no second observation
of it waiting, and nobody preempted."""

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot


@st.composite
def lent_out(draw):
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    borrowed = sum(sizes)
    own = draw(st.integers(borrowed, borrowed + 4))  # the quota's own guarantee
    need = draw(st.integers(own - borrowed + 1, own))  # short only because of the loans
    spare = draw(st.integers(0, 4))
    lender_gpus = borrowed + spare  # room for every borrower
    # Tree: org(1) ─ q(2), lender(3), sibling borrower quota(4) (no guarantee).
    quotas = [
        quota(1, name="org", gpus=own + lender_gpus),
        quota(2, name="q", gpus=own, parent_id=1, used=borrowed, borrowed_gpus=borrowed),
        quota(
            3, name="lender", gpus=lender_gpus, parent_id=1, weight=draw(st.sampled_from([1, 2]))
        ),
        quota(4, name="sib", gpus=0, parent_id=1),
    ]
    owners = [draw(st.sampled_from([2, 4])) for _ in sizes]
    # Borrowers on node 1; node 2 (16 GPUs, free) can host the job.
    held = [
        running(20 + i, on={1: g}, quota=owner, charged=2, started=draw(st.integers(0, 50)))
        for i, (g, owner) in enumerate(zip(sizes, owners, strict=True))
    ]
    free_1 = tuple(range(sum(sizes), 16)) if sum(sizes) < 16 else ()
    nodes = [node(1, gpus=16, free=free_1), node(2, gpus=16)]
    waiting = [job(10, quota=2, gpus=need, idle=IdleResources.OFF, at=55)]
    return snapshot(nodes, quotas, waiting, held), need


@settings(max_examples=150, deadline=None)
@given(lent_out(), st.sampled_from([0, 300]))
def test_the_guaranteed_job_starts_at_once_and_borrowers_are_only_moved(case, min_runtime):
    snap, _need = case
    result = plan(
        snap, T0 + timedelta(hours=1), PlanOptions(min_runtime_before_reclaim_s=min_runtime)
    )
    assert [a.job_id for a in result.admissions] == [10]
    assert result.preemptions == ()
    moved = [m for m in result.charges_home if not m.in_quota]
    assert moved and all(m.quota_id == 3 for m in moved)
