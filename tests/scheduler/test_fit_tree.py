"""Never-fit refusals on a quota tree (policy.scheduler.fit with `tree`): own guarantees,
limits on the path and what the borrowing scope could ever lend (docs/quota-tree.md)."""

import pytest

from policy.scheduler.fit import QuotaSize, never_fits
from policy.scheduler.model import QuotaSnap
from policy.scheduler.scope import scope_capacity
from policy.scheduler.tree import QuotaTree

OFF, ACCEPTABLE, ONLY = "Off", "Acceptable", "Only Idle Resources"
NEVER = ", so it could never start."
LIMITED = " at most (lending limits included)" + NEVER
ONE_LENDER = "each worker is charged to one quota, and the H200 quotas that quota "
CARVED = "(24 of its 32 are carved out by its children)"
LIMIT_24 = "Quota dept-x: limit 24 GPUs, job needs 32 GPUs (4 workers of 8)"
LIMIT_40 = "Quota org: limit 40 GPUs, job needs 48 GPUs (6 workers of 8)"


def snap(qid, name, gpus, parent=None, **extra) -> QuotaSnap:
    return QuotaSnap(qid, name, 1, "Lingjun", "H200", gpus, parent_id=parent, **extra)


# org 32 (own 8) ▸ dept-x 16 (own 8, limit 24, lends at most 4) ▸ team-x1 8;
#                ▸ dept-y 8;  and a second root, lab 8 (lends nothing).
ORG = snap(1, "org", 32, max_gpus=40)
DEPT_X = snap(2, "dept-x", 16, 1, max_gpus=24, lending_limit=4)
DEPT_Y = snap(3, "dept-y", 8, 1)
TEAM = snap(4, "team-x1", 8, 2)
LAB = snap(5, "lab", 8, lending_limit=0)
TREE = (ORG, DEPT_X, DEPT_Y, TEAM, LAB)


def size(q: QuotaSnap) -> QuotaSize:
    return QuotaSize(q.name, q.resource_type, q.gpu_type, q.gpus, id=q.id, tenant_gpus=999)


def refusal(q: QuotaSnap, workers: int, gpus: int, idle: str = OFF, tree=TREE) -> str | None:
    return never_fits(size(q), workers=workers, gpus_per_worker=gpus, idle=idle, tree=tree)


@pytest.mark.parametrize(
    ("quota", "workers", "gpus", "idle", "expected"),
    [
        (ORG, 1, 8, OFF, None),
        (ORG, 2, 8, OFF, "The job needs 16 GPUs (2 workers of 8); quota org guarantees 8 "
         "of its own " + CARVED + NEVER),
        (TEAM, 1, 8, OFF, None),
        (TEAM, 3, 4, OFF, "The job needs 12 GPUs (3 workers of 4); quota team-x1 has 8 in all"
         + NEVER),
        (TEAM, 4, 8, ONLY, LIMIT_24 + NEVER),
        (DEPT_X, 3, 8, ONLY, None),  # 8 own + 8 team-x1 + 8 of org and dept-y: the limit holds
        (DEPT_Y, 2, 8, ACCEPTABLE, None),  # its own 8 and org's 8
        (DEPT_Y, 6, 8, ONLY, LIMIT_40 + NEVER),
        # dept-y borrows dept-x's subtree through its lending limit of 4 only, and nothing of lab:
        (DEPT_Y, 5, 4, ONLY, None),  # 8 + 8 + 4 = 20
        (DEPT_Y, 7, 3, ONLY, "The job needs 21 GPUs (7 workers of 3); the H200 quotas that "
         "quota dept-y may borrow from could lend it 20 GPUs" + LIMITED),
        # whole workers: 8-GPU workers fit org's 8 and dept-y's 8; dept-x lends 4 (no 8).
        (DEPT_Y, 3, 6, ONLY, "The job needs 3 workers of 6 GPUs; " + ONE_LENDER
         + "dept-y may borrow from can hold 2 workers of that size" + LIMITED),
        (LAB, 3, 8, ONLY, None),  # its own, org's and dept-y's 8 (dept-x lends 4 only)
        (LAB, 4, 7, ONLY, "The job needs 4 workers of 7 GPUs; " + ONE_LENDER
         + "lab may borrow from can hold 3 workers of that size" + LIMITED),
    ],
)  # fmt: skip
def test_refusals_on_a_tree(quota, workers, gpus, idle, expected):
    assert refusal(quota, workers, gpus, idle) == expected


def test_scope_capacity_respects_lending_limits_of_the_subtrees_a_loan_leaves():
    tree = QuotaTree.of(TREE)
    assert scope_capacity(tree, 3) == 8 + 8 + 4  # dept-y: own, org's own, dept-x lends 4
    assert scope_capacity(tree, 4) == 8 + 8 + 8 + 8  # team-x1: inside dept-x, nothing left
    assert scope_capacity(tree, 5) == 8 + 8 + 4 + 8  # lab: its own, org's tree (dept-x: 4)
    assert scope_capacity(tree, 3, unit=8) == 1 + 1 + 0  # whole 8-GPU workers
    assert scope_capacity(tree, 4, unit=8) == 4


FLAT = (snap(1, "team-a", 8), snap(2, "team-b", 5))


@pytest.mark.parametrize(
    ("workers", "gpus", "idle"),
    [(2, 6, ONLY), (2, 4, ONLY), (1, 8, ONLY), (3, 4, OFF), (1, 8, OFF), (4, 4, ACCEPTABLE)],
)
def test_a_flat_tree_refuses_exactly_what_the_flat_rules_refuse(workers, gpus, idle):
    """The simulator and the form pass the tenant's quotas; on flat quotas that changes
    nothing, message included."""
    flat = QuotaSize("team-a", "Lingjun", "H200", 8, tenant_gpus=13, tenant_quota_gpus=(8, 5))
    with_tree = QuotaSize("team-a", "Lingjun", "H200", 8, id=1)
    kwargs = {"workers": workers, "gpus_per_worker": gpus, "idle": idle}
    assert never_fits(with_tree, tree=FLAT, **kwargs) == never_fits(flat, **kwargs)


def test_quotas_of_other_pools_in_the_tree_argument_are_ignored():
    other = QuotaSnap(9, "a100", 1, "Lingjun", "A100", 64, lending_limit=0, max_gpus=64)
    assert refusal(LAB, 3, 8, ONLY, tree=(*TREE, other)) is None
