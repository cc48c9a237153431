"""What the quota tree's rules need to know during one `plan()` (docs/quota-tree.md).

`TreeUse` counts, per quota, the GPUs held by the jobs of its subtree (`max_gpus`), the GPUs
charged into its subtree by jobs from outside it (`lending_limit`) and the GPUs its own jobs
borrow (the weighted fair share of idle capacity). Built once from the snapshot, updated as
the plan admits and moves; pure. For a flat quota (no parent, no children, no limits) none
of this changes a decision: its own guarantee is its `gpus` and no limit applies.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from policy.scheduler.model import QuotaSnap, RunningSnap
from policy.scheduler.tree import QuotaTree
from protocol import words


@dataclass(slots=True)
class TreeUse:
    tree: QuotaTree
    # True when no quota has a parent or a limit: the limit checks are skipped.
    flat: bool = True
    held: dict[int, int] = field(default_factory=dict)  # subtree's jobs, in quota or not
    lent: dict[int, int] = field(default_factory=dict)  # charged into the subtree from outside
    borrowed: dict[int, int] = field(default_factory=dict)  # the quota's own jobs, not in quota
    any_max: bool = False  # some quota has a `max_gpus`
    any_lending: bool = False  # some quota has a `lending_limit`

    @classmethod
    def of(cls, quotas: Iterable[QuotaSnap], running: Iterable[RunningSnap]) -> "TreeUse":
        quotas = tuple(quotas)
        tree = QuotaTree.of(quotas)
        flat = not tree.children and all(
            q.max_gpus is None and q.lending_limit is None for q in quotas
        )
        use = cls(
            tree,
            flat,
            borrowed={q.id: 0 for q in quotas},
            any_max=any(q.max_gpus is not None for q in quotas),
            any_lending=any(q.lending_limit is not None for q in quotas),
        )
        own_held = {q.id: q.guaranteed_gpus for q in quotas}  # in-quota pods: own jobs only
        for r in running:
            borrowed = r.borrowed_gpus  # by pod: a pod in quota is not borrowed
            if not borrowed or r.quota_id not in tree.quotas:
                continue
            use.borrowed[r.quota_id] += borrowed
            own_held[r.quota_id] += borrowed
            if not flat:
                for lender in r.lenders:
                    if lender in tree.quotas:
                        use.loan(lender, r.quota_id, r.gpus_charged_to(lender))
        if not flat:
            for qid, gpus in own_held.items():
                use.hold(qid, gpus)
        return use

    def hold(self, quota_id: int, gpus: int) -> None:
        """A job of `quota_id` holds `gpus` more (or fewer, negative)."""
        if self.flat or quota_id not in self.tree.quotas:
            return
        for a in self.tree.path(quota_id):
            self.held[a] = self.held.get(a, 0) + gpus

    def loan(self, lender_id: int, borrower_quota_id: int, gpus: int) -> None:
        """`gpus` of the lender's guarantee lent to a job of `borrower_quota_id` (negative:
        given back); counted against every subtree the loan leaves."""
        if self.flat or lender_id not in self.tree.quotas:
            return
        for a in self.tree.common_ancestor_below(lender_id, borrower_quota_id):
            self.lent[a] = self.lent.get(a, 0) + gpus

    def limit_short(self, quota_id: int, need: int) -> str | None:
        """Why `need` more GPUs for a job of the quota break a `max_gpus` on its path (the
        level that blocks, nearest first), or None."""
        if not self.any_max or quota_id not in self.tree.quotas:
            return None
        for a in self.tree.path(quota_id):
            q = self.tree.quotas[a]
            if q.max_gpus is None:
                continue
            held = self.held.get(a, 0)
            if held + need > q.max_gpus:
                return f"{q.name}: limit {words.gpus(q.max_gpus)}, {held} in use, job needs {need}"
        return None

    def loan_room(self, lender_id: int, borrower_quota_id: int) -> tuple[int, str] | None:
        """The most the lender may still lend to a job of the borrower's quota under the
        `lending_limit`s of the subtrees the loan leaves, with the name of the tightest; None
        when no lending limit applies."""
        if not self.any_lending or lender_id not in self.tree.quotas:
            return None
        best: tuple[int, str] | None = None
        for a in self.tree.common_ancestor_below(lender_id, borrower_quota_id):
            q = self.tree.quotas[a]
            if q.lending_limit is None:
                continue
            room = q.lending_limit - self.lent.get(a, 0)
            if best is None or room < best[0]:
                best = (room, q.name)
        return best

    def share(self, quota_id: int, extra: int = 0) -> float:
        """Borrowed GPUs over weight: who gets the next idle GPUs (lowest first)."""
        q = self.tree.quotas.get(quota_id)
        weight = q.weight if q is not None and q.weight > 0 else 1.0
        return (self.borrowed.get(quota_id, 0) + extra) / weight

    def borrow_order(self, quota_id: int) -> float:
        """The idle pass's order (lowest first): borrowed GPUs now plus, where the tenant
        keeps historical fair share, its borrowed GPUs averaged over the half-life
        (`QuotaSnap.history_gpus`), over weight (docs/quota-tree.md)."""
        q = self.tree.quotas.get(quota_id)
        if q is None or not q.history_gpus:
            return self.share(quota_id)
        weight = q.weight if q.weight > 0 else 1.0
        return (self.borrowed.get(quota_id, 0) + q.history_gpus) / weight


def with_own_guarantees(quotas: tuple[QuotaSnap, ...], tree: QuotaTree) -> tuple[QuotaSnap, ...]:
    """The quotas as the plan charges them: each one's `gpus` is its own guarantee (its
    children's carved out). A quota without children is returned as it is."""
    if not tree.children:
        return quotas
    return tuple(
        replace(q, gpus=tree.own_gpus(q.id)) if q.id in tree.children else q for q in quotas
    )
