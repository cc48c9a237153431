"""The sharing rules of docs/scheduling.md's decision table that a simulator scenario cannot
show (tests/scenarios/ has one per behaviour it can): fair share counts borrowed GPUs by pod,
and the per-quota options (off = today's rule)."""

from dataclasses import replace
from datetime import timedelta

from policy.scheduler.plan import PlanOptions, plan
from policy.scheduler.treeuse import TreeUse
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot

ONLY = IdleResources.ONLY
NOW = T0 + timedelta(hours=1)
NO_MIN = PlanOptions(min_runtime_before_reclaim_s=0)


def _partly_borrowing(pods_in_quota: tuple[bool, ...]):
    quotas = [
        quota(1, name="lender", gpus=12, used=8, borrowed_gpus=8, fair_share_preemption=True),
        quota(2, name="a", gpus=4, used=4, fair_share_preemption=True),
        quota(3, name="b", gpus=0, fair_share_preemption=True),
    ]
    # Job 20 of a: one pod in quota on a, one borrowed from lender; job 21 borrows 4.
    mixed = replace(
        running(20, on={1: 4}, quota=2, charged=2),
        gpus_by_node=((1, 4), (1, 4)),
        charges=(2, 1),
        pods_in_quota=pods_in_quota,
    )
    held = [mixed, running(21, on={2: 4}, quota=2, charged=1)]
    nodes = [node(1, free=()), node(2, free=(4, 5, 6, 7))]
    return snapshot(nodes, quotas, [job(10, quota=3, gpus=6, idle=ONLY)], held)


def test_fair_share_counts_gpus_by_pod():
    snap = _partly_borrowing((True, False))
    use = TreeUse.of(snap.quotas, snap.running)
    assert use.share(2) == 8  # 4 of job 20's 8 GPUs are in quota: not borrowed
    # b's share after (6) is above a's after losing job 21 (8 - 4): no victim.
    assert plan(snap, NOW, NO_MIN).preemptions == ()


def test_a_job_counted_wholly_as_borrowed_would_have_been_preempted():
    snap = _partly_borrowing((False, False))  # every pod borrowed: a's share is 12, 8 after
    [victim] = plan(snap, NOW, NO_MIN).preemptions
    assert victim.for_job_id == 10


# -- the per-quota options, each against today's rule -----------------------------------------
def _lender_with_borrower(**options):
    """team-a (8 GPUs) runs a1 in quota (4) and lends 4 to b1, an idle job of team-b with
    priority 2; a2 (priority 3) needs those 4 back."""
    quotas = [
        quota(1, name="team-a", gpus=8, used=8, borrowed_gpus=4, **options),
        quota(2, name="team-b", gpus=0),
    ]
    held = [
        running(10, on={1: 4}, quota=1, in_quota=True, priority=1),
        running(11, on={1: 4}, quota=2, charged=1, priority=2),
    ]
    return snapshot([node(1, free=())], quotas, [job(1, gpus=4, priority=3, name="a2")], held)


def _victims(snap) -> set[int]:
    return {p.job_id for p in plan(snap, NOW, NO_MIN).preemptions}


def _reason(snap) -> str:
    return plan(snap, NOW, NO_MIN).decision_for(1).reason


def test_reclaim_within_tree_any_lower_priority_never():
    assert _victims(_lender_with_borrower()) == {11}  # default Any: the borrower
    assert _victims(_lender_with_borrower(reclaim_within_tree="LowerPriority")) == {11}
    never = _lender_with_borrower(reclaim_within_tree="Never")
    assert _victims(never) == set()
    assert _reason(never) == (
        "quota team-a: capacity lent to idle jobs; kept: borrower of team-b has priority 2, "
        "not below 3 (reclaim within tree: Never)"
    )


def test_a_borrower_goes_before_the_lenders_own_lower_priority_job():
    snap = _lender_with_borrower(preemption="LowerPriority")
    assert _victims(snap) == {11}  # b1 (priority 2), not a1 (priority 1, in quota)


def test_lower_or_newer_equal_priority_preempts_only_newer_jobs_of_equal_priority():
    def snap(policy: str, started: int):
        quotas = [quota(1, name="q", gpus=4, used=4, preemption=policy)]
        held = [running(10, on={1: 4}, quota=1, in_quota=True, priority=3, started=started)]
        return snapshot([node(1, free=())], quotas, [job(1, gpus=4, priority=3, at=5)], held)

    assert _victims(snap("LowerOrNewerEqualPriority", started=10)) == {10}  # started after
    assert _victims(snap("LowerOrNewerEqualPriority", started=1)) == set()  # older
    assert _victims(snap("LowerPriority", started=10)) == set()
    reason = plan(snap("LowerOrNewerEqualPriority", 10), NOW, NO_MIN).preemptions[0].reason
    assert reason.endswith("(preemption within quota: LowerOrNewerEqualPriority)")


def test_borrow_within_tree_preempts_lower_priority_borrowers_up_to_the_threshold():
    def snap(threshold):
        quotas = [
            quota(1, name="lender", gpus=8, used=8, borrowed_gpus=8),
            quota(2, name="a", gpus=0, borrow_within_tree_max_priority=threshold),
            quota(3, name="b", gpus=0),
        ]
        held = [running(20, on={1: 8}, quota=3, charged=1, priority=1)]
        waiting = [job(10, quota=2, gpus=8, idle=ONLY, priority=5)]
        return snapshot([node(1, free=())], quotas, waiting, held)

    assert _victims(snap(None)) == set()  # off: today's rule
    assert _victims(snap(0)) == set()  # the borrower's priority 1 is above the threshold
    [victim] = plan(snap(1), NOW, NO_MIN).preemptions
    assert victim.job_id == 20
    assert victim.reason == (
        "preempted by job #10 of quota a borrowing within the tree (priority 5 over 1)"
    )


def test_a_borrower_charged_to_a_sibling_lender_is_reclaimed_naming_the_rule():
    quotas = [
        quota(1, name="team-a", gpus=8, lending_limit=0),
        quota(2, name="team-b", gpus=8, used=8, borrowed_gpus=8),
        quota(3, name="c", gpus=0),
    ]
    held = [running(20, on={1: 4}, quota=3, charged=2), running(21, on={2: 4}, quota=3, charged=2)]
    nodes = [node(1, free=(4, 5, 6, 7)), node(2, free=(4, 5, 6, 7))]
    snap = snapshot(nodes, quotas, [job(1, gpus=8, name="a-big")], held)
    [victim] = plan(snap, NOW, NO_MIN).preemptions
    assert victim.reason == (
        "reclaimed by team-a for job a-big (reclaiming its guarantee, tier: borrower charged "
        "to team-b)"
    )


def test_moves_in_one_plan_keep_a_lending_limit_together():
    """Found by the sharing property at 5,000 examples (and on main): two borrowers moved to
    the same lender in one plan were each checked against its lending limit alone."""
    quotas = [
        quota(1, name="r0", gpus=14, used=2),  # its own 2 in use: no room for its borrowers
        quota(2, name="r00", gpus=12, parent_id=1),
        quota(3, name="r000", gpus=5, parent_id=2, used=3, borrowed_gpus=3),
        quota(4, name="r001", gpus=7, parent_id=2, lending_limit=2),
        quota(5, name="r002", gpus=0, parent_id=2),
    ]
    held = [
        running(20, on={1: 2}, quota=1, charged=3),
        running(21, on={1: 1}, quota=1, charged=3),
        running(22, on={1: 2}, quota=1, in_quota=True),
    ]
    nodes = [node(1, free=tuple(range(5, 8))), node(2)]
    snap = snapshot(nodes, quotas, [job(1, quota=3, gpus=5)], held)
    result = plan(snap, NOW, NO_MIN)
    gpus = {20: 2, 21: 1}
    lent_to_r001 = sum(gpus[m.job_id] for m in result.charges_home if m.quota_id == 4)
    assert lent_to_r001 <= 2
