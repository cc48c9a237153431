"""plan() over hand-built snapshots: one test per rule, reasons and positions included."""

import pytest

from policy.scheduler.model import Placement, Snapshot
from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import JobStatus
from tests.scheduler.snaps import GENERAL, T0, job, node, quota, snapshot


def outcome(snap: Snapshot, **options) -> dict[int, str]:
    """job id → "admitted: <reason>" or "#<position> <reason>"."""
    result = plan(snap, T0, PlanOptions(**options))
    out = {a.job_id: f"admitted: {a.reason}" for a in result.admissions}
    out.update({q.job_id: f"#{q.position} {q.reason}" for q in result.queued})
    return out


def test_admits_and_books_quota_and_gpus():
    result = plan(snapshot([node(0)], jobs=[job(1, gpus=4)]), T0)
    [admission] = result.admissions
    assert admission.job_id == 1
    assert admission.placements == (Placement(0, 0, (0, 1, 2, 3)),)
    assert (admission.charged_quota_id, admission.in_quota) == (1, True)
    assert admission.reason == "placed on node-0 (GPUs 0-3)"
    assert result.queued == ()


def test_quota_full_waits_with_reason():
    snap = snapshot([node(0), node(1)], [quota(used=14)], [job(1, gpus=4)])
    assert outcome(snap) == {1: "#1 quota team-a: 14/16 GPUs in use, job needs 4"}


def test_quota_counts_admissions_earlier_in_the_same_plan():
    snap = snapshot(
        [node(0), node(1), node(2)], [quota(gpus=16)], [job(i, gpus=8) for i in (1, 2, 3)]
    )
    assert outcome(snap) == {
        1: "admitted: placed on node-0 (GPUs 0-7)",
        2: "admitted: placed on node-1 (GPUs 0-7)",
        3: "#1 quota team-a: 16/16 GPUs in use, job needs 8",
    }


def test_priority_then_fifo_decides_who_gets_scarce_gpus():
    jobs = [job(1, gpus=8, at=0), job(2, gpus=8, at=1, priority=5), job(3, gpus=8, at=2)]
    assert outcome(snapshot([node(0), node(1)], [quota(gpus=24)], jobs)) == {
        2: "admitted: placed on node-0 (GPUs 0-7)",
        1: "admitted: placed on node-1 (GPUs 0-7)",
        3: "#1 no node has 8 free H200 GPUs; all H200 GPUs are in use",
    }


def test_gang_all_or_nothing_reason_counts_placeable_workers():
    snap = snapshot([node(0), node(1, free=(0, 1, 2, 3))], jobs=[job(1, workers=2, gpus=8)])
    assert outcome(snap) == {1: "#1 needs 2 workers of 8 H200 GPUs; only 1 can be placed now"}


def test_no_block_large_enough_reports_largest_free_block():
    snap = snapshot([node(0, free=(0, 1, 2, 3)), node(1, free=(6, 7))], jobs=[job(1, gpus=8)])
    assert outcome(snap) == {1: "#1 no node has 8 free H200 GPUs; largest free block is 4"}


def test_worker_bigger_than_any_node():
    snap = snapshot([node(0)], [quota(gpus=32)], [job(1, gpus=16)])
    assert outcome(snap) == {1: "#1 needs 16 H200 GPUs per worker; the largest H200 node has 8"}


def test_greedy_backfill_lets_a_smaller_job_past_a_stuck_one():
    jobs = [job(1, gpus=8, at=0), job(2, gpus=2, at=1)]
    snap = snapshot([node(0, free=(0, 1, 2, 3))], jobs=jobs)
    assert outcome(snap) == {
        1: "#1 no node has 8 free H200 GPUs; largest free block is 2",
        2: "admitted: placed on node-0 (GPUs 0-1)",
    }


def test_without_backfill_the_first_stuck_job_holds_its_pool():
    jobs = [job(1, gpus=8, at=0), job(2, gpus=2, at=1)]
    snap = snapshot([node(0, free=(0, 1, 2, 3))], jobs=jobs)
    assert outcome(snap, backfill=False) == {
        1: "#1 no node has 8 free H200 GPUs; largest free block is 4",
        2: "#2 waiting behind job #1, which is first in line",
    }


@pytest.mark.parametrize(
    ("nodes", "reason"),
    [
        pytest.param(
            [node(0, gpu_type="A100")], "no Lingjun H200 nodes in the cluster", id="gpu-type"
        ),
        pytest.param(
            [node(0, resource_type=GENERAL)],
            "no Lingjun H200 nodes in the cluster",
            id="resource-type",
        ),
        pytest.param(
            [node(0, schedulable=False, why="cordoned")],
            "no schedulable Lingjun H200 node (1 cordoned)",
            id="cordoned",
        ),
        pytest.param(
            [node(0, schedulable=False, why="NotReady"), node(1, gpu_type="A100")],
            "no schedulable Lingjun H200 node (1 NotReady)",
            id="not-ready",
        ),
    ],
)
def test_only_matching_schedulable_nodes_get_work(nodes, reason):
    assert outcome(snapshot(nodes, jobs=[job(1)])) == {1: f"#1 {reason}"}


def test_cordoned_node_is_skipped_for_a_schedulable_one():
    nodes = [node(0, schedulable=False, why="cordoned"), node(1)]
    assert outcome(snapshot(nodes, jobs=[job(1)])) == {1: "admitted: placed on node-1 (GPU 0)"}


def test_quota_gpu_and_resource_type_pick_the_pool():
    quotas = [
        quota(1, name="lingjun-h200"),
        quota(2, name="gp-a100", gpu_type="A100", resource_type=GENERAL),
    ]
    nodes = [node(0), node(1, gpu_type="A100", resource_type=GENERAL)]
    jobs = [job(1, quota=2, gpus=8), job(2, quota=1, gpus=8)]
    assert outcome(snapshot(nodes, quotas, jobs)) == {
        1: "admitted: placed on node-1 (GPUs 0-7)",
        2: "admitted: placed on node-0 (GPUs 0-7)",
    }


def test_unhealthy_gpus_are_simply_not_free():
    # The loader leaves unhealthy GPUs out of free_gpu_indices; plan() never sees them.
    snap = snapshot([node(0, free=(0, 1, 3, 4, 5, 6, 7))], jobs=[job(1, gpus=8), job(2, gpus=2)])
    assert outcome(snap) == {
        1: "#1 no node has 8 free H200 GPUs; largest free block is 5",
        2: "admitted: placed on node-0 (GPUs 0-1)",
    }


def test_positions_count_waiting_jobs_per_quota_in_admission_order():
    quotas = [quota(1, name="team-a", used=16), quota(2, name="team-b", used=8, gpus=8)]
    jobs = [
        job(1, quota=1, at=3),
        job(2, quota=2, at=0),
        job(3, quota=1, at=1, priority=9),
        job(4, quota=1, at=0),
        job(5, quota=2, at=5),
    ]
    result = plan(snapshot([node(0)], quotas, jobs), T0)
    assert [(q.job_id, q.position) for q in result.queued] == [
        (3, 1),
        (2, 1),
        (4, 2),
        (1, 3),
        (5, 2),
    ]


def test_admitted_jobs_do_not_take_a_position():
    jobs = [job(1, gpus=8, at=0), job(2, gpus=1, at=1), job(3, gpus=8, at=2)]
    result = plan(snapshot([node(0, free=(0,))], jobs=jobs), T0)
    assert [a.job_id for a in result.admissions] == [2]
    assert [(q.job_id, q.position) for q in result.queued] == [(1, 1), (3, 2)]


def test_new_attempt_waits_for_old_workers_to_exit():
    snap = snapshot([node(0)], jobs=[job(1, active_pods=2)])
    assert outcome(snap) == {1: "#1 waiting for 2 workers of the previous attempt to exit"}


def test_cpu_or_memory_limits_are_named():
    nodes = [node(0, cpus=8), node(1, cpus=8)]
    snap = snapshot(nodes, jobs=[job(1, gpus=1, cpus=16), job(2, workers=3, gpus=1, cpus=8)])
    assert outcome(snap) == {
        1: "#1 no node has 1 H200 GPU, 16 CPUs and 16 GB memory free",
        2: "#2 needs 3 workers of 1 H200 GPU, 8 CPUs and 16 GB memory; only 2 can be placed "
        "now (CPU or memory)",
    }


def test_inqueue_and_pending_jobs_are_planned_alike():
    jobs = [job(1, status=JobStatus.INQUEUE, at=0), job(2, status=JobStatus.PENDING, at=1)]
    result = plan(snapshot([node(0)], jobs=jobs), T0)
    assert [a.job_id for a in result.admissions] == [1, 2]


def test_plan_is_deterministic_and_leaves_the_snapshot_alone():
    snap = snapshot([node(0), node(1, free=(2, 3))], jobs=[job(i, gpus=2) for i in range(6)])
    before = repr(snap)
    assert plan(snap, T0) == plan(snap, T0)
    assert repr(snap) == before


def test_reasons_describe_the_state_after_this_plans_admissions():
    # What the next snapshot will show: an unchanged cluster then gives unchanged reasons.
    jobs = [job(1, gpus=8, at=0), job(2, gpus=3, at=1), job(3, gpus=8, at=2), job(4, gpus=6, at=3)]
    snap = snapshot([node(0, free=(0, 1, 2, 3, 4, 5))], [quota(gpus=8)], jobs)
    assert outcome(snap) == {
        # Short of GPUs when looked at; by the end job 2 took quota it needs too.
        1: "#1 quota team-a: 3/8 GPUs in use, job needs 8",
        2: "admitted: placed on node-0 (GPUs 0-2)",
        3: "#2 quota team-a: 3/8 GPUs in use, job needs 8",
        4: "#3 quota team-a: 3/8 GPUs in use, job needs 6",
    }
    assert outcome(snap) == outcome(snap)


def test_next_plan_on_the_resulting_state_gives_the_same_reasons():
    jobs = [job(1, gpus=2, at=0), job(2, gpus=8, at=1), job(3, gpus=4, at=2)]
    first = plan(snapshot([node(0)], [quota(gpus=8)], jobs), T0)
    # The state the cycle would load next: job 1's GPUs busy and charged to the quota.
    after = snapshot([node(0, free=(2, 3, 4, 5, 6, 7))], [quota(gpus=8, used=2)], jobs[1:])
    assert plan(after, T0).queued == first.queued
