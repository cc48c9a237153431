"""Move before preempting (docs/quota-tree.md): a lender that needs its GPUs back first
re-charges its borrowers to other lenders in their borrowing scope with unused guarantee.
Nothing restarts: only the pods' charge changes (a `ChargeMove`, applied compare-and-set
like a move home). Only borrowers that cannot be moved are left to reclaim. Pure."""

from policy.scheduler.model import ChargeMove, JobSnap, QuotaSnap, RunningSnap
from policy.scheduler.working import _Working, scope_of


def move_borrowers(quota: QuotaSnap, short: int, job: JobSnap, state: _Working) -> bool:
    """Re-charge borrowers of `quota` elsewhere until `short` GPUs of its charge are free.
    All or nothing: returns False (and moves nobody) when the moves could not free enough."""
    candidates = [
        r
        for r in state.charged_to.get(quota.id, ())
        if not r.in_quota
        and not r.stopping
        and r.id not in state.victims
        and r.id not in state.moved
        and r.quota_id in state.quotas
    ]
    if not candidates:
        return False
    # The fewest moves: borrowers holding most of this quota's charge first.
    candidates.sort(key=lambda r: (-r.gpus_charged_to(quota.id), r.id))
    taken: dict[int, int] = {}  # GPUs this round's moves put on each target
    spent: dict[int, int] = {}  # of each subtree's lending limit, by this round's moves
    chosen: list[tuple[RunningSnap, QuotaSnap]] = []
    freed = 0
    for r in candidates:
        target = _target(r, quota.id, taken, spent, state)
        if target is None:
            continue
        added = r.gpus - r.gpus_charged_to(target.id)
        taken[target.id] = taken.get(target.id, 0) + added
        if state.tree.any_lending:
            for a in state.tree.tree.common_ancestor_below(target.id, r.quota_id):
                spent[a] = spent.get(a, 0) + added
        chosen.append((r, target))
        freed += r.gpus_charged_to(quota.id)
        if freed >= short:
            break
    if freed < short:
        return False
    for r, target in chosen:
        _commit(r, target, quota, job, state)
    return True


def _target(
    r: RunningSnap, away_from: int, taken: dict[int, int], spent: dict[int, int], state: _Working
) -> QuotaSnap | None:
    """The nearest lender in the borrower's scope that could hold all its pods, within every
    lending limit the loan leaves (counting this round's other moves: `spent`)."""
    tree = state.tree
    for lender in scope_of(state.quotas[r.quota_id], state):
        if lender.id == away_from or lender.id in state.reclaiming:
            continue
        already = r.gpus_charged_to(lender.id)
        room = (
            lender.gpus
            - state.usage[lender.id].gpus
            - state.demand.get(lender.id, 0)
            - taken.get(lender.id, 0)
            + already
        )
        if room < r.gpus:
            continue
        if tree.any_lending and not _within_limits(lender.id, r, r.gpus - already, spent, state):
            continue
        return lender
    return None


def _within_limits(
    lender_id: int, r: RunningSnap, gpus: int, spent: dict[int, int], state: _Working
) -> bool:
    """Would lending `gpus` more to `r`'s quota keep every lending limit the loan leaves?"""
    tree = state.tree
    for a in tree.tree.common_ancestor_below(lender_id, r.quota_id):
        limit = tree.tree.quotas[a].lending_limit
        if limit is not None and tree.lent.get(a, 0) + spent.get(a, 0) + gpus > limit:
            return False
    return True


def _commit(r: RunningSnap, target: QuotaSnap, quota: QuotaSnap, job: JobSnap, state: _Working):
    for lender in r.lenders:
        gpus = r.gpus_charged_to(lender)
        state.usage[lender].gpus -= gpus
        state.usage[lender].borrowed -= gpus
        state.tree.loan(lender, r.quota_id, -gpus)
    state.usage[target.id].gpus += r.gpus
    state.usage[target.id].borrowed += r.gpus
    state.tree.loan(target.id, r.quota_id, r.gpus)
    state.moved.add(r.id)
    state.charge_moves.append(
        ChargeMove(
            job_id=r.id,
            quota_id=target.id,
            from_quota_ids=r.lenders,
            pods=len(r.gpus_by_node),
            reason=f"charge moved to quota {target.name} (quota {quota.name} needs its "
            f"GPUs for {job.label})",
            in_quota=False,
        )
    )
