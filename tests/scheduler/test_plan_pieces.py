"""Table tests for the small pure pieces of plan(): order, quota fit, wording."""

import pytest

from policy.scheduler.model import Placement
from policy.scheduler.plan import (
    Usage,
    admission_order,
    describe_placements,
    diagnose_unschedulable_pool,
    format_indices,
    quota_shortfall,
)
from tests.scheduler.snaps import job, quota


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param([job(1, at=5), job(2, at=1), job(3, at=3)], [2, 3, 1], id="fifo-by-submit"),
        pytest.param(
            [job(1, at=0, priority=1), job(2, at=9, priority=5), job(3, at=5, priority=5)],
            [3, 2, 1],
            id="priority-first-then-fifo",
        ),
        pytest.param([job(7, at=0), job(3, at=0), job(5, at=0)], [3, 5, 7], id="id-breaks-ties"),
        pytest.param(
            [job(1, priority=-1), job(2, priority=0), job(3, priority=10)],
            [3, 2, 1],
            id="negative-priorities",
        ),
        pytest.param([], [], id="empty"),
    ],
)
def test_admission_order(jobs, expected):
    assert [j.id for j in admission_order(jobs)] == expected


@pytest.mark.parametrize(
    ("q", "used", "j", "expected"),
    [
        pytest.param(quota(gpus=16), Usage(gpus=12), job(1, gpus=4), None, id="exactly-fills"),
        pytest.param(
            quota(gpus=16),
            Usage(gpus=14),
            job(1, gpus=4),
            "quota team-a: 14/16 GPUs in use, job needs 4",
            id="full",
        ),
        pytest.param(
            quota(gpus=16),
            Usage(),
            job(1, workers=3, gpus=8),
            "quota team-a has 16 GPUs in all; job needs 24",
            id="bigger-than-quota",
        ),
        pytest.param(quota(gpus=0), Usage(), job(1, gpus=0), None, id="cpu-only-job"),
        pytest.param(
            quota(gpus=16, cpus=32),
            Usage(gpus=0, cpus=30),
            job(1, gpus=1, cpus=4),
            "quota team-a: 30/32 CPUs in use, job needs 4",
            id="cpu-guarantee",
        ),
        pytest.param(
            quota(gpus=16, cpus=0),
            Usage(cpus=10_000),
            job(1, gpus=1, cpus=4),
            None,
            id="cpus-0-means-unlimited",
        ),
        pytest.param(
            quota(gpus=16, memory_gb=64),
            Usage(memory_gb=0),
            job(1, workers=2, memory_gb=40),
            "quota team-a has 64 GB memory in all; job needs 80",
            id="memory-guarantee",
        ),
    ],
)
def test_quota_shortfall(q, used, j, expected):
    assert quota_shortfall(q, used, j) == expected


@pytest.mark.parametrize(
    ("indices", "text"),
    [
        ((0, 1, 2, 3), "0-3"),
        ((0,), "0"),
        ((0, 2, 3, 5), "0,2-3,5"),
        ((7, 6, 5, 0), "0,5-7"),
        ((), ""),
    ],
)
def test_format_indices(indices, text):
    assert format_indices(indices) == text


@pytest.mark.parametrize(
    ("placements", "text"),
    [
        ([Placement(0, 1, (0, 1, 2, 3))], "placed on node-0 (GPUs 0-3)"),
        ([Placement(0, 1, (5,))], "placed on node-0 (GPU 5)"),
        ([Placement(0, 1, ())], "placed on node-0 (no GPUs)"),
        (
            [Placement(0, 1, (0, 1, 2, 3)), Placement(1, 1, (4, 5, 6, 7))],
            "placed 2 workers on node-0 (GPUs 0-7)",
        ),
        (
            [Placement(0, 1, tuple(range(8))), Placement(1, 2, tuple(range(8)))],
            "placed 2 workers on node-0 (GPUs 0-7), node-1 (GPUs 0-7)",
        ),
    ],
)
def test_describe_placements(placements, text):
    assert describe_placements(tuple(placements), {1: "node-0", 2: "node-1"}) == text


@pytest.mark.parametrize(
    ("counts", "text"),
    [
        (None, "no Lingjun H200 nodes in the cluster"),
        ({"cordoned": 2}, "no schedulable Lingjun H200 node (2 cordoned)"),
        (
            {"NotReady": 1, "cordoned": 1, "Lost": 1},
            "no schedulable Lingjun H200 node (1 Lost, 1 NotReady, 1 cordoned)",
        ),
    ],
)
def test_diagnose_unschedulable_pool(counts, text):
    assert diagnose_unschedulable_pool(("Lingjun", "H200"), counts) == text


NEEDS_24 = "The job needs 24 GPUs (3 workers of 8); "
NEEDS_40 = "The job needs 40 GPUs (5 workers of 8); "
TEAM_A_16 = "quota team-a has 16 in all, so it could never start."
TENANT_32 = "all H200 quotas of this tenant have 32 in all, so it could never start."


@pytest.mark.parametrize(
    ("resource_type", "idle", "workers", "expected"),
    [
        ("Lingjun", "Off", 2, None),
        ("Lingjun", "Off", 3, NEEDS_24 + TEAM_A_16),
        ("Lingjun", "Acceptable", 3, None),
        ("Lingjun", "Only Idle Resources", 4, None),
        ("Lingjun", "Only Idle Resources", 5, NEEDS_40 + TENANT_32),
        ("General-purpose", "Only Idle Resources", 3, NEEDS_24 + TEAM_A_16),
        ("General-purpose", "Acceptable", 2, None),
    ],
)  # fmt: skip
def test_never_fits(resource_type, idle, workers, expected):
    from policy.scheduler.fit import QuotaSize, never_fits

    size = QuotaSize("team-a", resource_type, "H200", 16, tenant_gpus=32)
    assert never_fits(size, workers=workers, gpus_per_worker=8, idle=idle) == expected


def test_never_fits_counts_limited_cpus():
    from policy.scheduler.fit import QuotaSize, never_fits

    size = QuotaSize("team-a", "Lingjun", "H200", 16, cpus=64)
    assert never_fits(size, workers=2, gpus_per_worker=4, cpus_per_worker=48) == (
        "The job needs 96 CPUs (2 workers of 48); quota team-a has 64 in all, "
        "so it could never start."
    )


def test_never_fits_counts_whole_workers_per_lender():
    """Each pod is charged to one lender: 2 workers of 6 never run on quotas of 8 and 5."""
    from policy.scheduler.fit import QuotaSize, never_fits

    size = QuotaSize("team-a", "Lingjun", "H200", 8, tenant_gpus=13, tenant_quota_gpus=(8, 5))
    idle = "Only Idle Resources"
    assert never_fits(size, workers=2, gpus_per_worker=6, idle=idle) == (
        "The job needs 2 workers of 6 GPUs; each worker is charged to one quota, and the H200 "
        "quotas of this tenant can hold 1 worker of that size at most, so it could never start."
    )
    assert never_fits(size, workers=2, gpus_per_worker=4, idle=idle) is None  # 2 + 1 hosts
    assert never_fits(size, workers=1, gpus_per_worker=8, idle=idle) is None  # its own quota
