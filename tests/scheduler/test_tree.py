"""The quota tree's plain helpers (policy.scheduler.tree): own guarantees, paths, limits and
the nearest-first borrowing order."""

from policy.scheduler.model import QuotaSnap
from policy.scheduler.tree import QuotaTree


def q(id: int, gpus: int, parent: int | None = None, max_gpus: int | None = None) -> QuotaSnap:
    return QuotaSnap(
        id=id,
        name=f"q{id}",
        tenant_id=1,
        resource_type="Lingjun",
        gpu_type="H200",
        gpus=gpus,
        parent_id=parent,
        max_gpus=max_gpus,
    )


# org(1, 64) ─ vision(2, 32) ─ v1(4, 16), v2(5, 8)
#            └ speech(3, 16, limit 24)
TREE = QuotaTree.of(
    [q(1, 64), q(2, 32, 1), q(3, 16, 1, max_gpus=24), q(4, 16, 2), q(5, 8, 2), q(6, 4)]
)


def test_own_guarantee_is_what_the_children_leave():
    assert [TREE.own_gpus(i) for i in (1, 2, 3, 4, 5, 6)] == [16, 8, 16, 16, 8, 4]


def test_paths_and_subtrees():
    assert TREE.path(4) == (4, 2, 1)
    assert TREE.root(5) == 1
    assert TREE.subtree(2) == (2, 4, 5)
    assert TREE.subtree(6) == (6,)


def test_the_tightest_limit_on_the_path_wins():
    assert TREE.limit(3) == (24, 3)
    assert TREE.limit(4) is None
    limited = QuotaTree.of([q(1, 64, max_gpus=40), q(2, 32, 1, max_gpus=48)])
    assert limited.limit(2) == (40, 1)


def test_nearest_first_own_subtree_then_siblings_then_up():
    assert TREE.nearest_first(4) == (4, 2, 5, 1, 3)
    assert TREE.nearest_first(3) == (3, 1, 2, 4, 5)
    assert TREE.nearest_first(6) == (6,)


def test_a_loan_leaves_the_lenders_subtrees_below_the_common_ancestor():
    assert TREE.common_ancestor_below(5, 4) == (5,)
    assert TREE.common_ancestor_below(3, 4) == (3,)
    assert TREE.common_ancestor_below(4, 2) == (4,)  # a child lending to its parent
    assert TREE.common_ancestor_below(2, 4) == ()  # a parent's own guarantee to its child


def test_a_cycle_in_bad_data_never_loops():
    looped = QuotaTree.of([q(1, 8, 2), q(2, 8, 1)])
    assert looped.ancestors(1) == (2,)
