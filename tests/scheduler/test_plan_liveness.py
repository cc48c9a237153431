"""plan(): nothing waits forever and nothing stops the cycle (issue 10)."""

import importlib
from dataclasses import replace
from datetime import timedelta

import pytest

from policy.scheduler.plan import plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot

LATER = T0 + timedelta(hours=2)


def reasons(result) -> dict[int, str]:
    return {q.job_id: q.reason for q in result.queued}


# -- CPU-only jobs and reserved nodes ---------------------------------------------------------
def test_cpu_only_job_is_not_placed_on_a_node_reserved_for_a_starving_gang():
    # Job 1 (16 GPUs) has waited long: node-0 and node-1 are held for it. The CPU-only job
    # may go anywhere else, never on a held node (it used to crash plan() in take()).
    nodes = [node(0, free=(0, 1, 2, 3)), node(1, free=(0, 1, 2, 3)), node(2, free=())]
    jobs = [job(1, workers=2, gpus=8, at=0), job(2, gpus=0, at=1)]
    result = plan(snapshot(nodes, [quota(1, gpus=64)], jobs), LATER)
    [admission] = result.admissions
    assert admission.job_id == 2
    assert admission.placements[0].node_id == 2
    assert admission.placements[0].gpu_indices == ()


def test_cpu_only_job_waits_when_every_node_is_reserved():
    nodes = [node(0, free=(0, 1, 2, 3)), node(1, free=(0, 1, 2, 3))]
    jobs = [job(1, workers=2, gpus=8, at=0), job(2, gpus=0, at=1)]
    result = plan(snapshot(nodes, [quota(1, gpus=64)], jobs), LATER)
    assert result.admissions == ()
    assert set(reasons(result)) == {1, 2}


def test_cpu_only_job_leaves_a_preemptor_the_cpus_it_counts_on():
    # Job 1 (4 CPUs) reclaims node-0 from a borrower: the CPUs and memory its worker needs
    # there are kept for it, so a CPU-only job that needs more than the rest goes elsewhere,
    # and one that fits beside it may stay (only what the preemptor counts on leaves play).
    quotas = [quota(1, gpus=8), quota(2, name="team-b", gpus=8)]
    nodes = [node(0, free=(), cpus=8), node(1, free=())]
    borrower = running(9, on={0: 8}, quota=2, charged=1, in_quota=False)
    holder = running(8, on={1: 8}, quota=2, charged=2, in_quota=True)
    for cpus, where in ((8, 1), (4, 0)):
        jobs = [job(1, gpus=8, cpus=4, at=0), job(2, quota=2, gpus=0, cpus=cpus, at=1)]
        result = plan(snapshot(nodes, quotas, jobs, [borrower, holder]), LATER)
        assert [p.job_id for p in result.preemptions] == [9]
        placed = {a.job_id: a.placements[0].node_id for a in result.admissions}
        assert placed.get(2) == where, cpus


# -- one job's failure does not stop the cycle ------------------------------------------------
def _place_failing_for(job_id: int, monkeypatch) -> None:
    """Make placing one job raise (a stand-in for any bug hit by one job's evaluation)."""
    # The guaranteed pass places Off jobs (policy.scheduler.guaranteed, split out of plan.py).
    plan_module = importlib.import_module("policy.scheduler.guaranteed")
    real = plan_module._place

    def place(job, pool, state):
        if job.id == job_id:
            raise ValueError("boom\nsecond line")
        return real(job, pool, state)

    monkeypatch.setattr(plan_module, "_place", place)


def test_a_job_whose_evaluation_raises_is_set_aside_and_the_rest_are_admitted(monkeypatch, caplog):
    _place_failing_for(1, monkeypatch)
    jobs = [job(1, gpus=2, at=0, name="bad"), job(2, gpus=2, at=1), job(3, gpus=2, at=2)]
    result = plan(snapshot([node(0)], [quota(1)], jobs), T0)
    assert {a.job_id for a in result.admissions} == {2, 3}
    assert reasons(result) == {
        1: "set aside: the scheduler could not evaluate this job (ValueError: boom second line)"
    }
    assert "evaluating job bad failed" in caplog.text


# -- a job may hold back others only while capacity that will free up can satisfy it ----------
def test_a_job_larger_than_its_quota_never_holds_the_quota():
    jobs = [job(1, workers=3, gpus=8, at=0), job(2, gpus=4, at=1)]
    result = plan(snapshot([node(0), node(1)], [quota(1, gpus=16)], jobs), LATER)
    assert [a.job_id for a in result.admissions] == [2]
    assert reasons(result)[1] == "quota team-a has 16 GPUs in all; job needs 24"


def test_a_job_larger_than_its_schedulable_pool_never_holds_the_quota():
    # Quota 16, but node-1 is cordoned: only node-0's 8 GPUs are schedulable. Job 1 (2 x 8)
    # is short of quota (4 in use) and has waited long, but could never be placed: job 2
    # must not wait behind it with GPUs free.
    nodes = [node(0, free=(4, 5, 6, 7)), node(1, schedulable=False, why="cordoned")]
    quotas = [quota(1, gpus=16, used=4)]
    jobs = [job(1, workers=2, gpus=8, at=0), job(2, gpus=4, at=1)]
    result = plan(snapshot(nodes, quotas, jobs), LATER)
    assert [a.job_id for a in result.admissions] == [2]


def test_a_gang_larger_than_its_pool_reserves_nothing_and_says_it_can_never_be_placed():
    # Two 8-GPU nodes, one cordoned; job 1 needs 2 x 8 and waited long. It must not hold
    # the pool's reservation: job 3 (another quota, 8 GPUs, also waiting long) gets it.
    nodes = [node(0, free=(0, 1, 2, 3)), node(1, schedulable=False, why="cordoned")]
    quotas = [quota(1, gpus=32), quota(2, name="team-b", gpus=32)]
    jobs = [job(1, workers=2, gpus=8, at=0), job(3, quota=2, gpus=8, at=1), job(4, gpus=2, at=2)]
    result = plan(snapshot(nodes, quotas, jobs), LATER)
    # node-0 is held for job 3 (it will free up for it); job 4 may not take it.
    assert result.admissions == ()
    why = reasons(result)
    assert why[1] == (
        "can never be placed while the pool stays as it is: needs 2 workers of 8 H200 GPUs; "
        "the schedulable H200 nodes can host 1 (1 cordoned)"
    )


# -- reclaim livelock: free capacity goes to guarantees before borrowers ----------------------
ONLY, ACCEPTABLE = IdleResources.ONLY, IdleResources.ACCEPTABLE


def test_freed_gpus_go_to_the_guaranteed_job_not_to_the_borrowers_ahead_of_it():
    # Quota 16 on one 8-GPU node (bigger than its pool). The borrowers (restarted after a
    # reclaim) come first in line; the guaranteed job must still get the freed node, or it
    # reclaims them again next cycle, forever.
    jobs = [
        job(1, gpus=4, at=0, idle=ONLY),
        job(2, gpus=4, at=0, idle=ONLY),
        job(3, gpus=8, at=1),
    ]
    result = plan(snapshot([node(0)], [quota(1, gpus=16)], jobs), LATER)
    assert [(a.job_id, a.in_quota) for a in result.admissions] == [(3, True)]
    assert result.preemptions == ()


def test_acceptable_reclaims_lent_capacity_of_its_own_quota():
    # Quota 8 lent to a borrower of team-b; no idle capacity anywhere: the Acceptable job
    # reclaims like an Off job would (it used to wait for the borrower to finish).
    quotas = [quota(1, gpus=8, used=8, borrowed_gpus=8), quota(2, name="team-b", gpus=0)]
    borrower = running(9, on={0: 8}, quota=2, charged=1, in_quota=False)
    result = plan(
        snapshot([node(0, free=())], quotas, [job(1, gpus=8, idle=ACCEPTABLE)], [borrower]),
        LATER,
    )
    assert [(p.job_id, p.for_job_id, p.reclaim) for p in result.preemptions] == [(9, 1, True)]
    assert reasons(result)[1].startswith("waiting for 1 preempted job to release their GPUs; ")


def test_acceptable_preempts_by_priority_in_its_own_quota():
    quotas = [quota(1, gpus=8, used=8, preemption="LowerPriority")]
    low = running(9, on={0: 8}, quota=1, in_quota=True, priority=0)
    jobs = [job(1, gpus=8, priority=5, idle=ACCEPTABLE)]
    result = plan(snapshot([node(0, free=())], quotas, jobs, [low]), LATER)
    assert [(p.job_id, p.reclaim) for p in result.preemptions] == [(9, False)]


def test_a_waiting_acceptable_job_is_counted_in_its_quotas_demand():
    # node-0 has 8 free GPUs, which quota 1 guarantees to the Acceptable job. An Only-idle
    # job of another quota of the tenant, ahead in line, must not borrow them first.
    quotas = [quota(1, gpus=8), quota(2, name="team-b", gpus=0)]
    jobs = [job(1, quota=2, gpus=8, at=0, idle=ONLY), job(2, gpus=8, at=1, idle=ACCEPTABLE)]
    result = plan(snapshot([node(0)], quotas, jobs), LATER)
    assert [(a.job_id, a.in_quota) for a in result.admissions] == [(2, True)]


def test_an_acceptable_jobs_reason_covers_both_sides():
    quotas = [quota(1, gpus=8, used=8), quota(2, name="team-b", gpus=8, used=8)]
    jobs = [job(1, gpus=8, idle=ACCEPTABLE)]
    result = plan(snapshot([node(0, free=()), node(1, free=())], quotas, jobs), LATER)
    assert reasons(result)[1] == (
        "quota team-a: 8/8 GPUs in use, job needs 8; idle resources: the H200 quotas of this "
        "tenant have 0 GPUs unused in all, job needs 8"
    )


# -- flapping: per-hour cap, cool-down, default protection ------------------------------------
def test_a_job_preempted_often_this_hour_is_not_preempted_again():
    quotas = [quota(1, gpus=8, used=8, borrowed_gpus=8), quota(2, name="team-b", gpus=0)]
    recent = tuple(LATER - timedelta(minutes=m) for m in (50, 30, 10))
    capped = replace(running(9, on={0: 8}, quota=2, charged=1, in_quota=False), preempted_at=recent)
    snap = snapshot([node(0, free=())], quotas, [job(1, gpus=8)], [capped])
    assert plan(snap, LATER).preemptions == ()
    # An hour after the first of them, it may be preempted again.
    assert [p.job_id for p in plan(snap, LATER + timedelta(minutes=11)).preemptions] == [9]


def test_a_reclaimed_job_does_not_reborrow_from_that_lender_while_it_wants_capacity():
    # team-a reclaimed job 2 five minutes ago and still has a job waiting (job 1, which
    # cannot be placed yet): job 2 must not borrow team-a's room again meanwhile.
    quotas = [quota(1, gpus=16), quota(2, name="team-b", gpus=0)]
    nodes = [node(0, free=(0, 1, 2, 3))]
    reclaimed = ((1, LATER - timedelta(minutes=5)),)
    victim = replace(job(2, quota=2, gpus=4, at=0, idle=ONLY), reclaimed_by=reclaimed)
    jobs = [job(1, gpus=8, at=1), victim]
    result = plan(snapshot(nodes, quotas, jobs), LATER)
    assert result.admissions == ()
    assert reasons(result)[2] == ("idle resources: quota team-b has 0 unused GPUs, job needs 4")
    # Once team-a wants nothing, it lends to it again at once.
    alone = plan(snapshot(nodes, quotas, [victim]), LATER)
    assert [(a.job_id, a.charged_quota_id) for a in alone.admissions] == [(2, 1)]


def test_by_default_a_fresh_borrower_is_protected_from_reclaim():
    quotas = [quota(1, gpus=8, used=8, borrowed_gpus=8), quota(2, name="team-b", gpus=0)]
    fresh = running(9, on={0: 8}, quota=2, charged=1, in_quota=False, started=118)
    result = plan(snapshot([node(0, free=())], quotas, [job(1, gpus=8)], [fresh]), LATER)
    assert result.preemptions == ()
    assert "inside its minimum runtime" in reasons(result)[1]


# -- a preemptor's claim on the GPUs being released -------------------------------------------
@pytest.mark.parametrize("idle", [IdleResources.OFF, IdleResources.ACCEPTABLE])
def test_gpus_being_released_go_to_the_job_first_in_line_not_to_later_small_jobs(idle):
    # Job 9 (priority 1) is releasing 15 GPUs of quota team-a, preempted for job 1 (4 x 5
    # GPUs, priority 3) in an earlier cycle. Quota room (5 GPUs) and a node with free GPUs
    # exist now: a later small job must not take them, or job 1 finds the quota short again
    # when job 9 has gone and preempts the small job (the Kueue baseline looped like that).
    quotas = [quota(1, gpus=20, used=15, preemption="LowerPriority")]
    nodes = [node(0, gpus=16, free=(15,)), node(1, free=tuple(range(8)))]
    releasing = running(9, on={0: 15}, in_quota=True, priority=1, stopping=True)
    jobs = [
        job(1, workers=4, gpus=5, priority=3, at=0, idle=idle),
        job(2, gpus=1, priority=1, at=1, idle=idle),
    ]
    result = plan(snapshot(nodes, quotas, jobs, [releasing]), T0 + timedelta(minutes=2))
    assert result.admissions == ()
    assert result.preemptions == ()  # job 9 is already releasing: nothing new to preempt
    why = reasons(result)
    assert "release" in why[1]
    assert why[2].startswith("waiting behind job #1")


def test_a_claim_lasts_only_while_the_released_gpus_would_satisfy_the_job():
    # Nothing is being released: the small job backfills at once (job 1 cannot preempt:
    # the quota's policy is Never), so no GPU idles for a claim that nothing backs.
    quotas = [quota(1, gpus=20, used=15)]
    nodes = [node(0, gpus=16, free=(15,)), node(1, free=tuple(range(8)))]
    holder = running(9, on={0: 15}, in_quota=True, priority=1)
    jobs = [job(1, workers=4, gpus=5, priority=3, at=0), job(2, gpus=1, priority=1, at=1)]
    result = plan(snapshot(nodes, quotas, jobs, [holder]), T0 + timedelta(minutes=2))
    assert [a.job_id for a in result.admissions] == [2]
