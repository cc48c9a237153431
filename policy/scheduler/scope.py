"""What a Lingjun idle job's borrowing scope could ever lend it (pure; docs/quota-tree.md
"Refusals").

The never-fit check at submission needs an upper bound, not a plan: with every quota of the
tenant's pool empty, how many GPUs (or whole workers of a size) could be charged to lenders
for a job of quota B? Each lender lends at most its own guarantee; a loan that leaves a
subtree counts against that subtree's `lending_limit`. Lending limits sit on nested subtrees
(a laminar family), so adding up bottom-up, capping each subtree that does not hold B at its
lending limit, gives the exact maximum. Quotas of the tenant's other roots (other trees, or
flat quotas) are in the scope too, beyond B's own root, as they were before trees.
"""

from policy.scheduler.tree import QuotaTree


def scope_capacity(tree: QuotaTree, borrower_id: int, unit: int = 1) -> int:
    """Units of `unit` GPUs (1: GPUs; a worker's GPUs: whole workers, each charged to one
    lender) that the whole scope could lend a job of `borrower_id`, limits included."""
    unit = max(unit, 1)
    holding = set(tree.path(borrower_id))

    def capacity(quota_id: int, seen: frozenset[int]) -> int:
        if quota_id in seen:  # a cycle never loops forever (the rules refuse one anyway)
            return 0
        seen = seen | {quota_id}
        total = tree.own_gpus(quota_id) // unit + sum(
            capacity(child, seen) for child in tree.children.get(quota_id, ())
        )
        limit = tree.quotas[quota_id].lending_limit
        if quota_id not in holding and limit is not None:
            total = min(total, limit // unit)  # the loan leaves this subtree
        return total

    roots = [q for q in tree.quotas if tree.parent(q) is None]
    return sum(capacity(root, frozenset()) for root in roots)


def lending_limited(tree: QuotaTree) -> bool:
    """Whether any quota of the tree limits what it lends (the refusal names them)."""
    return any(q.lending_limit is not None for q in tree.quotas.values())
