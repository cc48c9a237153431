"""plan(): a Lingjun idle job pools several lenders, each pod charged to one, and reclaim
counts per lender only the pods charged to it (docs/scheduling.md)."""

from dataclasses import replace
from datetime import timedelta

from policy.scheduler.plan import plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot

ONLY = IdleResources.ONLY
LATER = T0 + timedelta(hours=2)


def charges(admission) -> list[int]:
    return [admission.charge_of(i) for i in range(len(admission.placements))]


def tenant(b_unused: int = 8, c_unused: int = 8) -> list:
    """team-a guarantees nothing; team-b and team-c (same tenant, H200) lend."""
    return [
        quota(1, name="team-a", gpus=0),
        quota(2, name="team-b", gpus=8, used=8 - b_unused),
        quota(3, name="team-c", gpus=8, used=8 - c_unused),
    ]


def test_an_only_idle_gang_pools_two_lenders_one_pod_each():
    result = plan(
        snapshot([node(0), node(1)], tenant(), [job(1, workers=2, gpus=8, idle=ONLY)]), T0
    )
    [admission] = result.admissions
    assert admission.in_quota is False
    assert charges(admission) == [2, 3]  # equal room: by id
    assert admission.charged_gpus() == {2: 8, 3: 8}
    assert admission.reason.endswith("idle resources of quotas team-b, team-c (not in quota)")


def test_the_lender_with_most_unused_capacity_is_charged_first():
    quotas = [quota(1, name="team-a", gpus=0), quota(2, name="team-b", gpus=4),
              quota(3, name="team-c", gpus=8)]  # fmt: skip
    result = plan(snapshot([node(0), node(1)], quotas, [job(1, workers=3, gpus=4, idle=ONLY)]), T0)
    assert charges(result.admissions[0]) == [3, 3, 2]


def test_a_worker_is_never_split_and_no_lender_is_over_committed():
    # 12 + 4 unused is 16 in all, but no lender can take a second 8-GPU worker.
    quotas = [quota(1, name="team-a", gpus=0), quota(2, name="team-b", gpus=12),
              quota(3, name="team-c", gpus=4)]  # fmt: skip
    jobs = [job(1, workers=2, gpus=8, idle=ONLY)]
    result = plan(snapshot([node(0), node(1)], quotas, jobs), T0)
    assert result.admissions == ()
    assert result.queued[0].reason == (
        "idle resources: the H200 quotas of this tenant have 16 GPUs unused in all, "
        "not as 2 whole workers of 8 (most: team-b, 12 unused)"
    )


def test_pooled_charges_count_per_lender_in_the_same_plan():
    # The pooled job takes all of team-b and team-c: the next idle job finds nothing.
    jobs = [job(1, workers=2, gpus=8, idle=ONLY), job(2, gpus=8, idle=ONLY, at=1)]
    result = plan(snapshot([node(0), node(1), node(2)], tenant(), jobs), T0)
    assert [a.job_id for a in result.admissions] == [1]


def test_never_pools_across_tenants():
    quotas = [*tenant(c_unused=0), quota(4, name="other", gpus=8, tenant=2)]
    jobs = [job(1, workers=2, gpus=8, idle=ONLY)]
    assert plan(snapshot([node(0), node(1)], quotas, jobs), T0).admissions == ()


def pooled(id: int = 10, **kw):
    """A running 2x8 idle job of team-a: its pod on node-0 charged to team-b, node-1 team-c."""
    r = running(id, on={0: 8, 1: 8}, quota=1, charged=2, **kw)
    return replace(r, gpus_by_node=((0, 8), (1, 8)), charges=(2, 3))


def test_a_lender_reclaims_a_pooled_job_whole():
    quotas = [
        quota(1, name="team-a", gpus=0),
        quota(2, name="team-b", gpus=8, used=8, borrowed_gpus=8),
        quota(3, name="team-c", gpus=8, used=8, borrowed_gpus=8),
    ]
    jobs = [job(1, quota=3, gpus=8, name="c1")]
    result = plan(snapshot([node(0, free=()), node(1, free=())], quotas, jobs, [pooled()]), LATER)
    assert [(p.job_id, p.reason) for p in result.preemptions] == [
        (10, "reclaimed by team-c for job c1")
    ]


def test_reclaim_credits_a_lender_only_with_the_pods_charged_to_it():
    # team-b (16) lent 8 to the pooled job (its other 8 are team-c's) and 8 to job 11. Its
    # job needs 16: stopping the pooled job gives team-b only 8 back, so job 11 goes too.
    quotas = [quota(1, name="team-a", gpus=0),
              quota(2, name="team-b", gpus=16, used=16, borrowed_gpus=16),
              quota(3, name="team-c", gpus=8, used=8, borrowed_gpus=8)]  # fmt: skip
    held = [pooled(), running(11, on={2: 8}, quota=1, charged=2, started=1)]
    nodes = [node(0, free=()), node(1, free=()), node(2, free=())]
    jobs = [job(1, quota=2, workers=2, gpus=8, name="b1")]
    result = plan(snapshot(nodes, quotas, jobs, held), LATER)
    assert sorted(p.job_id for p in result.preemptions) == [10, 11]


# -- Acceptable moves its charge home ---------------------------------------------------------
ACCEPTABLE = IdleResources.ACCEPTABLE


def borrowed_acceptable(id: int = 20, **kw):
    """A running Acceptable job of team-a (8) on node-1, charged to team-b, not in quota."""
    r = running(id, on={1: 8}, quota=1, charged=2, **kw)
    return replace(r, idle_resources=ACCEPTABLE)


def home_quotas(a_used: int = 0):
    return [
        quota(1, name="team-a", gpus=8, used=a_used),
        quota(2, name="team-b", gpus=8, used=8, borrowed_gpus=8),
    ]


def test_a_borrowed_acceptable_job_moves_its_charge_home_when_its_quota_has_room():
    result = plan(
        snapshot([node(0), node(1, free=())], home_quotas(), [], [borrowed_acceptable()]), T0
    )
    [move] = result.charges_home
    assert (move.job_id, move.quota_id, move.from_quota_ids, move.pods) == (20, 1, (2,), 1)
    assert move.reason == "charge moved home to quota team-a (in quota)"


def test_no_move_home_while_its_quota_is_full_or_claimed_by_a_waiting_job():
    held = [borrowed_acceptable()]
    full = plan(snapshot([node(0, free=()), node(1, free=())], home_quotas(8), [], held), T0)
    assert full.charges_home == ()
    # team-a's own waiting job claims the room first (it cannot be placed: no free GPUs).
    jobs = [job(1, gpus=8, name="a1")]
    claimed = plan(snapshot([node(0, free=()), node(1, free=())], home_quotas(), jobs, held), T0)
    assert claimed.charges_home == ()


def test_after_moving_home_the_lender_has_its_capacity_and_reclaims_nothing():
    # team-b's own job arrives in the same plan: the moved job is not its victim and the
    # room the move gave back to team-b lets b1 start on node-0's free GPUs.
    jobs = [job(1, quota=2, gpus=8, name="b1")]
    held = [borrowed_acceptable()]
    result = plan(snapshot([node(0), node(1, free=())], home_quotas(), jobs, held), LATER)
    assert [m.job_id for m in result.charges_home] == [20]
    assert result.preemptions == ()
    assert [a.job_id for a in result.admissions] == [1]


def test_only_acceptable_borrowers_move_home():
    only = running(20, on={1: 8}, quota=1, charged=2)  # Only Idle Resources keeps borrowing
    result = plan(snapshot([node(0), node(1, free=())], home_quotas(), [], [only]), T0)
    assert result.charges_home == ()
