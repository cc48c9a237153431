"""The quota tree as plain values (docs/quota-tree.md): parents, own guarantees, limits.

Pure and built once per snapshot: `plan()`, the never-fit check at submission, accounting and
the simulator read the same tree. A flat quota (no parent, no children) is a root of depth 1,
so every rule here means for it exactly what it meant before trees existed.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from policy.scheduler.model import QuotaSnap


@dataclass(frozen=True, slots=True)
class QuotaTree:
    quotas: dict[int, QuotaSnap]
    children: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # Memos (the tree never changes during a plan; plan() asks for paths thousands of times).
    _paths: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)
    _leaving: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def of(cls, quotas: Iterable[QuotaSnap]) -> "QuotaTree":
        by_id = {q.id: q for q in quotas}
        kids: dict[int, list[int]] = {}
        for q in by_id.values():
            if q.parent_id is not None and q.parent_id in by_id:
                kids.setdefault(q.parent_id, []).append(q.id)
        return cls(by_id, {p: tuple(sorted(c)) for p, c in kids.items()})

    def parent(self, quota_id: int) -> int | None:
        parent = self.quotas[quota_id].parent_id
        return parent if parent in self.quotas else None

    def ancestors(self, quota_id: int) -> tuple[int, ...]:
        """The quota's parent, grandparent, … up to its root (nearest first)."""
        out: list[int] = []
        seen = {quota_id}
        parent = self.parent(quota_id)
        while parent is not None and parent not in seen:  # a cycle never loops forever
            out.append(parent)
            seen.add(parent)
            parent = self.parent(parent)
        return tuple(out)

    def path(self, quota_id: int) -> tuple[int, ...]:
        """The quota itself, then its ancestors up to the root."""
        path = self._paths.get(quota_id)
        if path is None:
            path = self._paths[quota_id] = (quota_id, *self.ancestors(quota_id))
        return path

    def root(self, quota_id: int) -> int:
        return self.path(quota_id)[-1]

    def subtree(self, quota_id: int) -> tuple[int, ...]:
        """The quota and all its descendants (depth first, the quota first)."""
        out, stack = [], [quota_id]
        while stack:
            current = stack.pop()
            if current in out:
                continue
            out.append(current)
            stack.extend(reversed(self.children.get(current, ())))
        return tuple(out)

    def own_gpus(self, quota_id: int) -> int:
        """Its guarantee less what its children carve out of it (never below 0)."""
        carved = sum(self.quotas[c].gpus for c in self.children.get(quota_id, ()))
        return max(0, self.quotas[quota_id].gpus - carved)

    def limit(self, quota_id: int) -> tuple[int, int] | None:
        """The tightest `max_gpus` on the quota's path, as (GPUs, the quota setting it)."""
        limits = [
            (self.quotas[q].max_gpus, q)
            for q in self.path(quota_id)
            if self.quotas[q].max_gpus is not None
        ]
        return min(limits) if limits else None

    def nearest_first(self, quota_id: int) -> tuple[int, ...]:
        """Every quota of the quota's tree in borrowing order: its own subtree, then its
        siblings' subtrees, then its parent's siblings', … up to the root."""
        order = list(self.subtree(quota_id))
        below = quota_id
        for ancestor in self.ancestors(quota_id):
            order.append(ancestor)
            for sibling in self.children.get(ancestor, ()):
                if sibling != below:
                    order.extend(self.subtree(sibling))
            below = ancestor
        return tuple(dict.fromkeys(order))

    def common_ancestor_below(self, lender_id: int, borrower_id: int) -> tuple[int, ...]:
        """The lender's path up to, not including, the first quota that also holds the
        borrower: the subtrees whose `lending_limit` a loan from lender to borrower leaves."""
        key = (lender_id, borrower_id)
        memo = self._leaving.get(key)
        if memo is not None:
            return memo
        holding = set(self.path(borrower_id))
        out = []
        for q in self.path(lender_id):
            if q in holding:
                break
            out.append(q)
        self._leaving[key] = result = tuple(out)
        return result
