"""The borrowing pass of `plan()` (docs/scheduling.md): `Only Idle Resources` jobs and the
`Acceptable` ones still waiting use idle capacity. General-purpose: the job's own quota.
Lingjun: every quota of the same tenant and GPU type, nearest first in the quota tree (its
own subtree, siblings, … up to the root; `working.scope_of`); when no single lender has the
whole job, whole workers are spread over several lenders, each pod charged to one. Never
across tenants or GPU types; never a lender in reclaim or in its cool-down; never beyond a
`lending_limit` (docs/quota-tree.md)."""

from collections.abc import Callable, Iterable

from policy.scheduler.fairshare import fair_share_preempt
from policy.scheduler.guaranteed import _wait_guaranteed
from policy.scheduler.model import Admission, JobSnap, PoolKey, QuotaSnap
from policy.scheduler.reasons import _n, describe_placements, diagnose_unschedulable_pool
from policy.scheduler.working import (
    _book,
    _Both,
    _diagnose,
    _place,
    _Short,
    _Working,
    release_kept,
    scope_of,
)
from protocol import words


def _idle_pass(job: JobSnap, state: _Working, deferred: dict) -> Admission | str | _Short | _Both:
    """Second pass: idle jobs borrow; an `Acceptable` job that cannot borrow then has every
    right of an `Off` job in its own quota (reclaim, priority preemption, the hold)."""
    quota = state.quotas[job.quota_id]
    release_kept(state, job.id)  # the room it kept in the guaranteed pass: borrow or preempt
    limited = state.tree.limit_short(quota.id, job.total_gpus)  # again: earlier admissions
    if limited:
        deferred.pop(job.id)
        return limited
    idle = _borrow_or_known_refusal(job, quota, state)
    guaranteed = deferred.pop(job.id)
    if isinstance(idle, Admission):
        return idle
    fair = fair_share_preempt(job, quota, state)  # only where the tenant turned it on
    if fair:
        return fair
    if guaranteed is None:
        return idle
    return _Both(_wait_guaranteed(job, quota, guaranteed, state), idle)


NO_NEAR_LENDER = "no lender this near"  # a nearest-first round's refusal (never shown)


def nearest_rounds(
    ordered: Callable[[], Iterable[JobSnap]], deferred: dict, state: _Working
) -> list[Admission]:
    """Nearest first from the lender's side (docs/quota-tree.md): before the idle pass, a
    round per tree level lets idle jobs borrow only from lenders at most that many levels
    away (a loan leaving the lender's quota only, then its parent's subtree, …), so a
    subtree's idle guarantee goes to its own quotas before anyone outside it. Admissions only:
    whoever still waits is looked at again, with every right, in the idle pass. Flat quotas
    have no rounds (today's order)."""
    tree = state.tree.tree
    if not tree.children:
        return []
    depth = max(len(tree.path(q)) for q in tree.quotas)
    admitted: list[Admission] = []
    # The last level (every lender of the tree) is the idle pass itself: scopes are nearest
    # first from the borrower's side, so it needs no round of its own.
    for level in range(depth - 1):
        for job in ordered():  # the idle pass's fair order, each round afresh
            quota = state.quotas[job.quota_id]
            if quota.resource_type != "Lingjun" or state.tree.limit_short(quota.id, job.total_gpus):
                continue
            result = _borrow_or_known_refusal(job, quota, state, level)
            if isinstance(result, Admission):
                deferred.pop(job.id)
                admitted.append(result)
                _book(state, job, result)
    return admitted


def _borrow_or_known_refusal(
    job: JobSnap, quota: QuotaSnap, state: _Working, level: int | None = None
) -> Admission | str:
    """`_borrow`, except that a job the same shape as one refused since the plan's last
    change gets that refusal again. A borrowing try reads the job's quota and shape, its
    cool-downs and excluded nodes (those jobs are always tried) and the plan's state, never
    its id or age; so on an unchanged state the answer is the same. A long queue of
    same-sized jobs on a full cluster is then one try per shape, not one per job."""
    if job.reclaimed_by or job.excluded_node_ids:
        return _borrow(job, quota, state, level)
    key = (job.quota_id, job.workers, job.gpus_per_worker, job.cpus_per_worker,
           job.memory_gb_per_worker, level)  # fmt: skip
    changes = state.changes()
    known = state.borrow_refusals.get(key)
    if known is not None and known[0] == changes:
        return known[1]
    result = _borrow(job, quota, state, level)
    if isinstance(result, str):
        state.borrow_refusals[key] = (changes, result)
    return result


def lenders_for(quota: QuotaSnap, lingjun: dict[tuple[int, PoolKey], list[QuotaSnap]]):
    """Quotas whose unused capacity an idle job of `quota` may use (docs/scheduling.md): its own on
    General-purpose; on Lingjun every quota of the same tenant, resource and GPU type, its
    own first. Never across tenants or GPU types."""
    if quota.resource_type != "Lingjun":
        return [quota]
    others = [q for q in lingjun.get((quota.tenant_id, quota.pool), ()) if q.id != quota.id]
    return [quota, *others]


def _borrow(
    job: JobSnap, quota: QuotaSnap, state: _Working, level: int | None = None
) -> Admission | str:
    need = job.total_gpus
    lenders = scope_of(quota, state)
    if level is not None:  # a nearest-first round: lenders at most `level` levels away
        leaving = state.tree.tree.common_ancestor_below
        lenders = [
            q
            for q in lenders
            if q.id in state.tree.tree.quotas and len(leaving(q.id, quota.id)) <= level
        ]
        if not lenders:
            return NO_NEAR_LENDER
    cooling = _cooling(job, state)
    if cooling:
        lenders = [q for q in lenders if q.id not in cooling]
        if not lenders:
            names = ", ".join(sorted(state.quotas[i].name for i in cooling if i in state.quotas))
            return f"idle resources: reclaimed by {names} recently; not borrowing there yet"
    room = {q.id: _lendable(q, quota.id, state, {}) for q in lenders}
    able = [q for q in lenders if room[q.id] >= need and q.id not in state.reclaiming]
    pooled: tuple[QuotaSnap, ...] = ()
    total = 0  # unused GPUs of the lenders together (not counting those in reclaim)
    if not able and len(lenders) > 1:
        total = sum(room[q.id] for q in lenders if room[q.id] > 0 and q.id not in state.reclaiming)
        if total >= need:  # else no set of lenders can hold it: skip the pooling
            pooled = _pool_lenders(job, lenders, room, state)
    if not able and not pooled:
        if level is not None:
            return NO_NEAR_LENDER  # a round's refusal is never shown: no wording
        return _refusal(job, quota, lenders, room, total, state)
    key = quota.pool
    pool = state.capacity.pool(key)
    if pool is None or pool.size == 0:
        return diagnose_unschedulable_pool(key, state.capacity.unschedulable.get(key))
    placements = _place(job, pool, state)
    if placements is None:
        return f"idle resources: {_diagnose(pool, job, state)}"
    where = describe_placements(placements, state.capacity.names)
    if pooled:  # each pod charged to one lender, ranks in order, most unused lender first
        charges = tuple(q.id for q in pooled)
        names = ", ".join(dict.fromkeys(q.name for q in pooled))
        return Admission(
            job_id=job.id,
            placements=placements,
            charged_quota_id=charges[0],
            in_quota=False,
            reason=f"{where}; idle resources of quotas {names} (not in quota)",
            where=where,
            charges=charges,
        )
    lender = able[0]
    return Admission(
        job_id=job.id,
        placements=placements,
        charged_quota_id=lender.id,
        in_quota=False,
        reason=f"{where}; idle resources of quota {lender.name} (not in quota)",
        where=where,
    )


def _refusal(
    job: JobSnap,
    quota: QuotaSnap,
    lenders: list[QuotaSnap],
    room: dict[int, int],
    total: int,
    state: _Working,
) -> str:
    """Why no lender (nor a pool of them) can hold the job, in words."""
    need = job.total_gpus
    best = max(lenders, key=lambda q: (room[q.id], -q.id))
    free = f"{max(room[best.id], 0)} unused"
    if best.id in state.reclaiming:
        free += ", being reclaimed"
    limited = _limited_lender(lenders, quota.id, room, state)
    if len(lenders) == 1:
        unused = words.gpu_noun(max(room[best.id], 0))
        return f"idle resources: quota {quota.name} has {free} {unused}, job needs {need}{limited}"
    # Several lenders are pooled (whole workers each): say what they have together.
    short = (
        f"job needs {need}"
        if total < need
        else f"not as {_n(job.workers, 'whole worker')} of {job.gpus_per_worker}"
    )
    most = f" (most: {best.name}, {free})" if total or best.id in state.reclaiming else ""
    return (
        f"idle resources: the {quota.gpu_type} quotas of this tenant have {words.gpus(total)} "
        f"unused in all, {short}{most}{limited}"
    )


def _pool_lenders(
    job: JobSnap, lenders: list[QuotaSnap], room: dict[int, int], state: _Working
) -> tuple[QuotaSnap, ...]:
    """No single lender has the whole job (Lingjun only): one lender per worker, the lender
    with the most unused GPUs first (then by id), each taking as many whole workers as its
    room holds. Returns the lender of each rank, or () when the tenant's room is too small.
    A worker is never split between lenders, so no lender is charged beyond its size."""
    per = job.gpus_per_worker
    order = sorted(
        (q for q in lenders if q.id not in state.reclaiming and room[q.id] >= per),
        key=lambda q: (-room[q.id], q.id),
    )
    charges: list[QuotaSnap] = []
    spent: dict[int, int] = {}  # lending limits shared by several lenders of one subtree
    for q in order:
        free = _lendable(q, job.quota_id, state, spent) if spent else room[q.id]
        take = min(free // per, job.workers - len(charges)) if per else job.workers
        if take <= 0:
            continue
        charges.extend([q] * take)
        if state.tree.any_lending:
            for a in state.tree.tree.common_ancestor_below(q.id, job.quota_id):
                spent[a] = spent.get(a, 0) + take * per
        if len(charges) == job.workers:
            return tuple(charges)
    return ()


def _lendable(lender: QuotaSnap, borrower_quota_id: int, state: _Working, spent: dict) -> int:
    """What the lender can lend a job of the borrower's quota now: its unused own guarantee
    less its waiting jobs' demand, within the `lending_limit` of every subtree the loan
    leaves (less what this admission already `spent` of them)."""
    room = lender.gpus - state.usage[lender.id].gpus - state.demand.get(lender.id, 0)
    tree = state.tree
    if not tree.any_lending:
        return room
    for a in tree.tree.common_ancestor_below(lender.id, borrower_quota_id):
        limit = tree.tree.quotas[a].lending_limit
        if limit is not None:
            room = min(room, limit - tree.lent.get(a, 0) - spent.get(a, 0))
    return room


def _cooling(job: JobSnap, state: _Working) -> set[int]:
    """Lenders that reclaimed this job within the cool-down and still want capacity back
    (jobs of theirs wait, or they reclaim in this plan). A lender with nothing waiting lends
    to it again at once: GPUs are never left idle for the cool-down's sake."""
    if not job.reclaimed_by:
        return set()
    window = state.options.reclaim_cooldown_s
    return {
        q
        for q, when in job.reclaimed_by
        if (state.now - when).total_seconds() < window
        and (state.demand.get(q) or q in state.reclaiming)
    }


def _limited_lender(lenders: list[QuotaSnap], borrower: int, room: dict, state: _Working) -> str:
    """The lending limit that holds back most unused guarantee, worded ("; dept-x: lending
    limit 4 GPUs, 4 lent"), or "" when none does."""
    if not state.tree.any_lending:
        return ""
    worst: tuple[int, str] | None = None
    for q in lenders:
        unused = q.gpus - state.usage[q.id].gpus - state.demand.get(q.id, 0)
        held_back = unused - room[q.id]
        capped = state.tree.loan_room(q.id, borrower)
        if held_back > 0 and capped is not None and (worst is None or held_back > worst[0]):
            worst = (held_back, capped[1])
    if worst is None:
        return ""
    name = worst[1]
    limit = next(q.lending_limit for q in state.tree.tree.quotas.values() if q.name == name)
    lent = next(
        state.tree.lent.get(i, 0) for i, q in state.tree.tree.quotas.items() if q.name == name
    )
    return f"; {name}: lending limit {words.gpus(limit)}, {lent} lent"
