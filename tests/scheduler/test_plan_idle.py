"""plan(): idle resources, reclaim, priority preemption and the starvation rule
(docs/scheduling.md)."""

from datetime import timedelta

import pytest

from policy.scheduler.plan import PlanOptions, lenders_for, plan
from policy.scheduler.preempt import lost_gpu_seconds, victim_order
from policy.statuses import IdleResources
from tests.scheduler.snaps import GENERAL, T0, job, node, quota, running, snapshot

ONLY, ACCEPTABLE = IdleResources.ONLY, IdleResources.ACCEPTABLE
LATER = T0 + timedelta(hours=2)


def admitted(result) -> dict[int, tuple[int, bool]]:
    """job id → (charged quota, in quota)."""
    return {a.job_id: (a.charged_quota_id, a.in_quota) for a in result.admissions}


def reasons(result) -> dict[int, str]:
    return {q.job_id: q.reason for q in result.queued}


# -- who may lend -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("own", "other", "lends"),
    [
        pytest.param(quota(1, resource_type=GENERAL), quota(2, resource_type=GENERAL), False,
                     id="general-purpose-only-own"),
        pytest.param(quota(1), quota(2, name="team-b"), True, id="lingjun-same-tenant"),
        pytest.param(quota(1), quota(2, name="team-b", tenant=2), False, id="lingjun-other-tenant"),
        pytest.param(quota(1), quota(2, name="team-b", gpu_type="H100"), False,
                     id="lingjun-other-gpu-type"),
        pytest.param(quota(1), quota(2, name="team-b", resource_type=GENERAL), False,
                     id="lingjun-not-general-purpose"),
    ],
)  # fmt: skip
def test_lenders(own, other, lends):
    from policy.scheduler.plan import _index

    lenders = _index(snapshot(quotas=[own, other]))[0]
    ids = [q.id for q in lenders_for(own, lenders)]
    assert ids == ([1, 2] if lends else [1])


# -- borrowing --------------------------------------------------------------------------------
def test_general_purpose_idle_job_borrows_its_own_quotas_unused_capacity():
    quotas = [
        quota(1, name="team-a", gpus=8, resource_type=GENERAL),
        quota(2, name="team-b", gpus=16, resource_type=GENERAL),
    ]
    nodes = [node(i, resource_type=GENERAL) for i in range(3)]
    jobs = [job(1, gpus=8, idle=ONLY), job(2, workers=2, gpus=8, idle=ONLY, at=1)]
    result = plan(snapshot(nodes, quotas, jobs), T0)
    assert admitted(result) == {1: (1, False)}
    assert reasons(result) == {2: "idle resources: quota team-a has 0 unused GPUs, job needs 16"}


def test_lingjun_idle_job_borrows_from_a_sibling_quota_of_the_tenant():
    quotas = [quota(1, name="team-a", gpus=8, used=8), quota(2, name="team-b", gpus=16)]
    result = plan(snapshot([node(0), node(1)], quotas, [job(1, gpus=8, idle=ONLY)]), T0)
    assert admitted(result) == {1: (2, False)}
    assert result.admissions[0].reason.endswith("idle resources of quota team-b (not in quota)")


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(quota(2, name="team-b", gpus=16, tenant=2), id="other-tenant"),
        pytest.param(quota(2, name="team-b", gpus=16, gpu_type="H100"), id="other-gpu-type"),
    ],
)
def test_lingjun_never_borrows_across_tenants_or_gpu_types(other):
    quotas = [quota(1, name="team-a", gpus=8, used=8), other]
    nodes = [node(0), node(1), node(2, gpu_type="H100")]
    result = plan(snapshot(nodes, quotas, [job(1, gpus=8, idle=ONLY)]), T0)
    assert result.admissions == ()
    assert reasons(result) == {1: "idle resources: quota team-a has 0 unused GPUs, job needs 8"}


def test_acceptable_lands_in_quota_first_then_on_idle_capacity():
    quotas = [quota(1, name="team-a", gpus=8), quota(2, name="team-b", gpus=16)]
    jobs = [job(1, gpus=8, idle=ACCEPTABLE), job(2, gpus=8, idle=ACCEPTABLE, at=1)]
    result = plan(snapshot([node(0), node(1)], quotas, jobs), T0)
    assert admitted(result) == {1: (1, True), 2: (2, False)}


def test_idle_jobs_are_charged_so_lenders_never_exceed_their_size():
    quotas = [quota(1, name="team-a", gpus=0), quota(2, name="team-b", gpus=8)]
    jobs = [job(i, gpus=4, idle=ONLY, at=i) for i in range(1, 4)]
    result = plan(snapshot([node(0), node(1)], quotas, jobs), T0)
    assert admitted(result) == {1: (2, False), 2: (2, False)}
    assert reasons(result)[3] == (
        "idle resources: the H200 quotas of this tenant have 0 GPUs unused in all, job needs 4"
    )


# -- reclaim ----------------------------------------------------------------------------------
def reclaim_snapshot(borrowers, *, free0=(), jobs=None, preemption="Never"):
    """team-a (16) lends to team-b's idle jobs; team-a's guaranteed job needs 16."""
    lent = sum(b.gpus for b in borrowers)
    quotas = [
        quota(1, name="team-a", gpus=16, used=lent, borrowed_gpus=lent, preemption=preemption),
        quota(2, name="team-b", gpus=0),
    ]
    nodes = [node(0, free=free0), node(1, free=())]
    return snapshot(nodes, quotas, jobs or [job(1, workers=2, gpus=8, name="a1")], borrowers)


def test_reclaim_preempts_borrowers_and_the_preemptor_waits_for_them():
    borrowers = [
        running(10, on={0: 8}, quota=2, charged=1),
        running(11, on={1: 8}, quota=2, charged=1),
    ]
    result = plan(reclaim_snapshot(borrowers), LATER)
    assert [(p.job_id, p.for_job_id, p.reason) for p in result.preemptions] == [
        (10, 1, "reclaimed by team-a for job a1"),
        (11, 1, "reclaimed by team-a for job a1"),
    ]  # equal in every rule: the id breaks the tie
    assert result.admissions == ()
    assert reasons(result) == {1: "waiting for 2 preempted jobs to release their GPUs"}


def test_victims_releasing_already_are_waited_for_not_preempted_again():
    borrowers = [
        running(10, on={0: 8}, quota=2, charged=1, stopping=True),
        running(11, on={1: 8}, quota=2, charged=1, stopping=True),
    ]
    result = plan(reclaim_snapshot(borrowers), LATER)
    assert result.preemptions == ()
    assert reasons(result) == {1: "waiting for 2 preempted jobs to release their GPUs"}


def test_victim_order_priority_then_lost_work_then_most_recent():
    victims = [
        running(1, on={0: 1}, priority=2, started=0),
        running(2, on={0: 1}, priority=1, started=0, checkpoint=100),  # loses 20 min
        running(3, on={0: 1}, priority=1, started=0, checkpoint=110),  # loses 10 min
        running(4, on={0: 1}, priority=1, started=110),  # loses 10 min, started later
        running(5, on={0: 1}, priority=9, stopping=True),  # already releasing: first
    ]
    assert [v.id for v in victim_order(victims, LATER)] == [5, 4, 3, 2, 1]
    assert lost_gpu_seconds(running(6, on={0: 4}, started=110), LATER) == 4 * 600


def test_only_the_victims_needed_are_preempted():
    # The 2-GPU borrower goes first (lower priority) but is not enough (4 + 2 free on
    # node-0); the 8-GPU one alone makes room, so the small one is dropped again.
    borrowers = [
        running(10, on={0: 2}, quota=2, charged=1, priority=0),
        running(11, on={1: 8}, quota=2, charged=1, priority=1),
    ]
    snap = reclaim_snapshot(borrowers, free0=(4, 5, 6, 7), jobs=[job(1, gpus=8, name="a1")])
    result = plan(snap, LATER)
    assert [p.job_id for p in result.preemptions] == [11]


def test_min_runtime_protects_fresh_borrowers():
    borrowers = [running(10, on={0: 8}, quota=2, charged=1, started=115)]  # 5 minutes old
    snap = reclaim_snapshot(borrowers, free0=(), jobs=[job(1, gpus=8, name="a1")])
    protected = plan(snap, LATER, PlanOptions(min_runtime_before_reclaim_s=600))
    assert protected.preemptions == ()
    assert reasons(protected) == {
        1: "quota team-a: capacity lent to idle jobs; kept: borrower of team-b is inside "
        "its minimum runtime before reclaim (600 s)"
    }
    assert [p.job_id for p in plan(snap, LATER).preemptions] == [10]


def test_in_quota_jobs_are_never_reclaimed():
    # An Acceptable job that landed in quota holds the guarantee: nothing to reclaim.
    held = [running(10, on={0: 8}, quota=1, in_quota=True)]
    quotas = [quota(1, name="team-a", gpus=8, used=8)]
    result = plan(snapshot([node(0, free=())], quotas, [job(1, gpus=8)], held), LATER)
    assert result.preemptions == ()
    assert reasons(result) == {1: "quota team-a: 8/8 GPUs in use, job needs 8"}


def test_a_reclaiming_quota_lends_nothing_more_in_the_same_plan():
    borrowers = [running(10, on={0: 8}, quota=2, charged=1)]
    quotas = [
        quota(1, name="team-a", gpus=16, used=8, borrowed_gpus=8),
        quota(2, name="team-b", gpus=0),
    ]
    jobs = [job(1, workers=2, gpus=8, name="a1"), job(2, quota=2, gpus=8, idle=ONLY, at=1)]
    result = plan(snapshot([node(0, free=()), node(1)], quotas, jobs, borrowers), LATER)
    assert [p.job_id for p in result.preemptions] == [10]
    assert result.admissions == ()
    assert reasons(result)[2] == (
        "idle resources: the H200 quotas of this tenant have 0 GPUs unused in all, job needs 8"
    )


# -- priority preemption ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "victim_priority", "preempted"),
    [("LowerPriority", 1, True), ("LowerPriority", 5, False), ("Never", 1, False)],
)
def test_priority_preemption_inside_a_quota(policy, victim_priority, preempted):
    held = [running(10, on={0: 8}, quota=1, in_quota=True, priority=victim_priority)]
    quotas = [quota(1, name="team-a", gpus=8, used=8, preemption=policy)]
    result = plan(snapshot([node(0, free=())], quotas, [job(1, gpus=8, priority=5)], held), LATER)
    if preempted:
        [p] = result.preemptions
        assert p.reason == "preempted by higher-priority job #1 in quota team-a"
    else:
        assert result.preemptions == ()
        assert reasons(result) == {1: "quota team-a: 8/8 GPUs in use, job needs 8"}


# -- starvation -------------------------------------------------------------------------------
def test_small_jobs_backfill_past_a_big_one_until_it_has_waited_long():
    quotas = [quota(1, gpus=16, used=8)]
    # (Job 1 is 2 x 8, which the pool can host once node-1 drains; a single 16-GPU worker
    # could never be placed and so may not hold the quota: test_plan_liveness.)
    jobs = [job(1, workers=2, gpus=8, at=0), job(2, gpus=4, at=1)]
    snap = snapshot([node(0), node(1, free=())], quotas, jobs)
    assert admitted(plan(snap, T0 + timedelta(minutes=5))) == {2: (1, True)}
    late = plan(snap, T0 + timedelta(minutes=30))
    assert late.admissions == ()
    assert reasons(late)[2] == "waiting behind job #1, which has waited longest for quota team-a"


def test_a_long_waiting_gang_reserves_nodes_and_backfill_uses_the_others():
    quotas = [quota(1, gpus=64)]
    nodes = [node(0, free=(0, 1, 2, 3, 4, 5)), node(1, free=(0, 1)), node(2, free=(0, 1))]
    jobs = [job(1, gpus=8, at=0), job(2, gpus=2, at=1), job(3, gpus=2, at=2)]
    early = plan(snapshot(nodes, quotas, jobs), T0 + timedelta(minutes=5))
    assert {a.job_id: a.placements[0].node_id for a in early.admissions} == {2: 1, 3: 2}
    late = plan(snapshot(nodes, quotas, jobs), T0 + timedelta(minutes=30))
    # node-0 (the emptiest) is held for job 1; the small jobs go elsewhere.
    assert {a.job_id: a.placements[0].node_id for a in late.admissions} == {2: 1, 3: 2}
    nodes2 = [node(0, free=(0, 1, 2, 3, 4, 5)), node(1, free=(0, 1))]
    late2 = plan(snapshot(nodes2, quotas, jobs), T0 + timedelta(minutes=30))
    assert {a.job_id: a.placements[0].node_id for a in late2.admissions} == {2: 1}
    assert "no node has 2 free H200 GPUs" in reasons(late2)[3]
