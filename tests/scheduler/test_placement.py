"""Table tests for gang placement: packing, best fit, GPU indices, CPU/memory limits."""

import pytest

from policy.scheduler.model import Placement
from policy.scheduler.placement import CapacityIndex, PoolIndex, natural_key
from tests.scheduler.snaps import GENERAL, node

POOL = ("Lingjun", "H200")


def place(nodes, workers, gpus, cpus=4, memory_gb=16):
    """Place one job; return [(rank, node name, indices)] or None."""
    pool = PoolIndex(POOL, nodes)
    shape = (workers, gpus, cpus, memory_gb)
    chosen = pool.find(shape)
    if chosen is None:
        return None
    names = {n.id: n.name for n in nodes}
    return [(p.rank, names[p.node_id], p.gpu_indices) for p in pool.take(chosen, shape)]


@pytest.mark.parametrize(
    ("nodes", "shape", "expected"),
    [
        pytest.param(
            [node(0), node(1, free=(4, 5, 6, 7))],
            (1, 4),
            [(0, "node-1", (4, 5, 6, 7))],
            id="best-fit-prefers-partly-used-node",
        ),
        pytest.param(
            [node(0, free=(0, 1, 2, 3, 4, 5)), node(1, free=(5, 6, 7))],
            (1, 2),
            [(0, "node-1", (5, 6))],
            id="tightest-node-that-fits",
        ),
        pytest.param(
            [node(0, gpus=4), node(1, free=(0, 1, 2, 3))],
            (1, 4),
            [(0, "node-1", (0, 1, 2, 3))],
            id="partly-used-before-untouched-at-equal-free",
        ),
        pytest.param(
            [node(10), node(2)],
            (1, 8),
            [(0, "node-2", tuple(range(8)))],
            id="natural-name-order",
        ),
        pytest.param(
            [node(0), node(1)],
            (2, 4),
            [(0, "node-0", (0, 1, 2, 3)), (1, "node-0", (4, 5, 6, 7))],
            id="gang-packs-one-node",
        ),
        pytest.param(
            [node(0), node(1), node(2), node(3)],
            (3, 8),
            [(r, f"node-{r}", tuple(range(8))) for r in range(3)],
            id="gang-whole-nodes",
        ),
        pytest.param(
            [node(0), node(1, free=(4, 5, 6, 7)), node(2)],
            (3, 4),
            [
                (0, "node-0", (0, 1, 2, 3)),
                (1, "node-0", (4, 5, 6, 7)),
                (2, "node-1", (4, 5, 6, 7)),
            ],
            id="gang-fewest-nodes-then-best-fit-for-the-rest",
        ),
        pytest.param(
            [node(0), node(1, free=(0, 1, 2, 3))],
            (2, 8),
            None,
            id="gang-all-or-nothing",
        ),
        pytest.param(
            [node(0, free=(1, 3, 4, 6))],
            (1, 2),
            [(0, "node-0", (1, 3))],
            id="lowest-indices-first",
        ),
        pytest.param([], (1, 1), None, id="no-nodes"),
    ],
)
def test_find_and_take(nodes, shape, expected):
    assert place(nodes, *shape) == expected


def test_cpus_limit_which_node_fits():
    nodes = [node(0, cpus=4), node(1, cpus=128)]
    assert place(nodes, 1, 1, cpus=8) == [(0, "node-1", (0,))]


def test_memory_limits_workers_per_node():
    nodes = [node(0, memory_gb=1024), node(1, memory_gb=1024)]
    assert place(nodes, 2, 2, memory_gb=600) == [(0, "node-0", (0, 1)), (1, "node-1", (0, 1))]


def test_cpus_make_gang_impossible():
    assert place([node(0, cpus=10), node(1, cpus=10)], 2, 1, cpus=16) is None


def test_cpu_only_workers_need_no_gpus():
    nodes = [node(0, free=(), cpus=64), node(1, free=(), cpus=8)]
    assert place(nodes, 1, 0, cpus=8) == [(0, "node-1", ())]


def test_find_changes_nothing_and_take_updates_the_index():
    pool = PoolIndex(POOL, [node(0), node(1, free=(0, 1, 2, 3))])
    assert (pool.largest_free_block(), pool.placeable_by_gpus(4, 10)) == (8, 3)
    assert pool.find((2, 8, 4, 16)) is None  # not enough: nothing booked
    assert (pool.largest_free_block(), pool.placeable_by_gpus(4, 10)) == (8, 3)
    shape = (1, 4, 4, 16)
    placed = pool.take(pool.find(shape), shape)
    assert placed == (Placement(0, 1, (0, 1, 2, 3)),)
    assert (pool.largest_free_block(), pool.placeable_by_gpus(4, 10)) == (8, 2)
    placed = pool.take(pool.find((1, 6, 4, 16)), (1, 6, 4, 16))
    assert placed == (Placement(0, 0, (0, 1, 2, 3, 4, 5)),)
    assert (pool.largest_free_block(), pool.placeable_by_gpus(1, 10)) == (2, 2)


def test_a_node_is_used_until_full_before_the_next():
    pool = PoolIndex(POOL, [node(0), node(1)])
    got = []
    for _ in range(4):
        shape = (1, 4, 4, 16)
        got += [(p.node_id, p.gpu_indices) for p in pool.take(pool.find(shape), shape)]
    assert got == [(0, (0, 1, 2, 3)), (0, (4, 5, 6, 7)), (1, (0, 1, 2, 3)), (1, (4, 5, 6, 7))]
    assert pool.find((1, 1, 4, 16)) is None


def test_capacity_index_groups_pools_and_skips_unschedulable_nodes():
    index = CapacityIndex(
        [
            node(0),
            node(1, gpu_type="A100"),
            node(2, resource_type=GENERAL),
            node(3, schedulable=False, why="cordoned"),
            node(4, schedulable=False, why="NotReady"),
        ]
    )
    assert [n.snap.id for n in index.pool(POOL).nodes] == [0]
    assert [n.snap.id for n in index.pool(("Lingjun", "A100")).nodes] == [1]
    assert [n.snap.id for n in index.pool((GENERAL, "H200")).nodes] == [2]
    assert index.unschedulable[POOL] == {"cordoned": 1, "NotReady": 1}
    assert index.pool(("Lingjun", "H100")) is None


def test_natural_key():
    names = ["node-10", "node-2", "node-1", "gpu-a"]
    assert sorted(names, key=natural_key) == ["gpu-a", "node-1", "node-2", "node-10"]
