"""plan(): nothing waits forever and nothing stops the cycle (issue 10)."""

from datetime import timedelta

from jobs.scheduler.plan import plan
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


def test_cpu_only_job_skips_nodes_freed_for_a_preemptor():
    # Job 1 reclaims node-0 from a borrower; the CPU-only job must not land there.
    quotas = [quota(1, gpus=8), quota(2, name="team-b", gpus=8)]
    nodes = [node(0, free=()), node(1, free=())]
    borrower = running(9, on={0: 8}, quota=2, charged=1, in_quota=False)
    holder = running(8, on={1: 8}, quota=2, charged=2, in_quota=True)
    jobs = [job(1, gpus=8, at=0), job(2, quota=2, gpus=0, at=1)]
    result = plan(snapshot(nodes, quotas, jobs, [borrower, holder]), LATER)
    assert [p.job_id for p in result.preemptions] == [9]
    placed = {a.job_id: a.placements[0].node_id for a in result.admissions}
    assert placed.get(2) != 0
