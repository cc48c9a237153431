"""Preemption for a waiting guaranteed job, and charges moving home (docs/scheduling.md).

`_preempt`: reclaim of capacity a quota lent (only the victims' pods charged to that quota
give it capacity back; a pooled idle job still stops whole), or priority preemption inside
a `LowerPriority` quota; victims chosen by `preempt.choose_victims`. `_move_home`: a running
`Acceptable` borrower is re-charged to its own quota, in quota, once that has room."""

from collections.abc import Iterable
from datetime import datetime

from policy.scheduler.model import ChargeHome, JobSnap, Preemption, QuotaSnap, RunningSnap
from policy.scheduler.preempt import choose_victims, preempted_within_hour, reclaimable
from policy.scheduler.reasons import _n
from policy.scheduler.working import _Short, _Working
from policy.statuses import IdleResources


def _move_home(running: Iterable[RunningSnap], state: _Working) -> list[ChargeHome]:
    """Borrowing `Acceptable` jobs whose own quota now has room for the whole job move
    their charge home, in quota: no longer reclaim victims (docs/scheduling.md). Room is what the
    quota's waiting guaranteed jobs (its demand) leave; by priority, then oldest first."""
    moves: list[ChargeHome] = []
    candidates = [
        r
        for r in running
        if r.idle_resources == IdleResources.ACCEPTABLE and not r.in_quota and not r.stopping
    ]
    if not candidates:
        return moves
    far = datetime.max.replace(tzinfo=state.now.tzinfo)
    candidates.sort(key=lambda r: (-r.priority, r.started_at or far, r.id))
    for r in candidates:
        quota = state.quotas.get(r.quota_id)
        # A quota that limits CPUs or memory is left out: RunningSnap does not carry them,
        # and a move must never take a quota over its guarantee.
        if quota is None or quota.cpus or quota.memory_gb or quota.id in state.reclaiming:
            continue
        used, home = state.usage[quota.id], r.gpus_charged_to(quota.id)
        claimed = state.demand.get(quota.id, 0)
        if used.guaranteed + claimed + r.gpus > quota.gpus:
            continue
        if used.gpus - home + r.gpus + claimed > quota.gpus:
            continue
        for lender in r.lenders:
            gpus = r.gpus_charged_to(lender)
            state.usage[lender].gpus -= gpus
            state.usage[lender].borrowed -= gpus
            state.tree.loan(lender, r.quota_id, -gpus)
        used.gpus += r.gpus
        state.tree.borrowed[quota.id] = state.tree.borrowed.get(quota.id, 0) - r.borrowed_gpus
        state.moved.add(r.id)
        moves.append(
            ChargeHome(
                job_id=r.id,
                quota_id=quota.id,
                from_quota_ids=r.lenders,
                pods=len(r.gpus_by_node),
                reason=f"charge moved home to quota {quota.name} (in quota)",
            )
        )
    return moves


def _preempt(job: JobSnap, quota: QuotaSnap, short: _Short, state: _Working) -> str | None:
    """Reclaim or priority-preempt for a guaranteed job (docs/scheduling.md, the decision
    table). Returns its waiting reason, or None when no set of victims would make room."""
    choice, protected = victim_choice(job, quota, short, state)
    if choice is None:
        if protected:  # those it may take do not make room: say who is kept
            return f"quota {quota.name}: capacity lent to idle jobs; kept: {protected}"
        return None
    state.held += 1
    for v in choice.victims:
        state.victims.add(v.id)
        why = _why(v, job, quota, state)
        if not v.stopping:
            state.preemptions.append(Preemption(v.id, job.id, why, reclaim=not v.in_quota))
    # The free GPUs it will start on beside its victims' are kept for it in this plan.
    pool = state.capacity.pool(quota.pool)
    assert pool is not None  # victim_choice found none without one
    freed: dict[int, int] = {}
    for v in choice.victims:
        for node_id, gpus in v.gpus_by_node:
            freed[node_id] = freed.get(node_id, 0) + gpus
    pool.hold_for(freed, job.shape, job.excluded_node_ids)
    state.reclaiming.add(quota.id)
    # The free room it counts on besides its victims' GPUs is booked to it for the rest of
    # the plan: a job looked at later would otherwise take it, and it would preempt again.
    room = job.total_gpus - sum(v.gpus_charged_to(quota.id) for v in choice.victims)
    if room > 0:
        state.usage[quota.id].gpus += room
    return f"waiting for {_n(len(choice.victims), 'preempted job')} to release their GPUs"


def victim_choice(job: JobSnap, quota: QuotaSnap, short: _Short, state: _Working):
    """The victims the decision table would take to make room for `job` (a `preempt.Choice`,
    or None), and (worded) who a protection rule keeps. Changes nothing but the memo of
    (quota, priority, shape) that found none."""
    memo = (quota.id, job.priority, job.shape)
    if memo in state.no_victims:  # found none before: the same answer, its words too
        return None, state.no_victims[memo]
    within = quota.preemption in WITHIN_QUOTA
    if short.pool is None and not short.lent and not within:
        return None, ""  # short of its own guarantee: only priority preemption helps
    candidates, protected = _candidates(job, quota, short, state)
    pool = state.capacity.pool(quota.pool)
    if not candidates or pool is None:
        state.no_victims[memo] = protected
        return None, protected
    used = state.usage[quota.id]
    need = job.total_gpus

    def eligible(victims) -> bool:
        # Only a victim's workers charged to this quota give it capacity back (a pooled idle
        # job stops whole, but its other workers free their own lenders' capacity).
        freed = sum(v.gpus_charged_to(quota.id) for v in victims)
        freed_guaranteed = sum(v.gpus_charged_to(quota.id) for v in victims if v.in_quota)
        if used.guaranteed - freed_guaranteed + need > quota.gpus:
            return False
        if used.gpus - freed + need > quota.gpus:
            return False
        by_node: dict[int, int] = {}
        for v in victims:
            for node_id, g in v.gpus_by_node:
                by_node[node_id] = by_node.get(node_id, 0) + g
        return pool.placeable_with(by_node, job.gpus_per_worker, job.workers, job.excluded_node_ids)

    choice = choose_victims(job, candidates, eligible, state.now, _tier(quota, state))
    if choice is None:
        state.no_victims[memo] = protected
    return choice, protected


def _why(v: RunningSnap, job: JobSnap, quota: QuotaSnap, state: _Working) -> str:
    """The victim's reason, naming the rule of the decision table that chose it."""
    if v.in_quota:
        why = f"preempted by higher-priority {job.label} in quota {quota.name}"
        if quota.preemption != "LowerPriority":
            why += f" (preemption within quota: {quota.preemption})"
        return why
    why = f"reclaimed by {quota.name} for {job.label}"
    if quota.id not in v.lenders:  # the borrower sits on GPUs the job's guarantee needs
        lender = state.quotas.get(v.charged_quota_id)
        name = lender.name if lender is not None else f"#{v.charged_quota_id}"
        why += f" (reclaiming its guarantee, tier: borrower charged to {name})"
    return why


WITHIN_QUOTA = ("LowerPriority", "LowerOrNewerEqualPriority")


def within_quota_victim(quota: QuotaSnap, job: JobSnap, r: RunningSnap) -> bool:
    """May `job` preempt the in-quota job `r` of its own quota (the quota's
    `preemption_within_quota`, Kueue's withinClusterQueue)? Equal priority counts only for
    `LowerOrNewerEqualPriority`, and only a job started after `job` was submitted."""
    if not r.in_quota or r.quota_id != quota.id or quota.preemption not in WITHIN_QUOTA:
        return False
    if r.priority < job.priority:
        return True
    return (
        quota.preemption == "LowerOrNewerEqualPriority"
        and r.priority == job.priority
        and r.started_at is not None
        and r.started_at > job.submitted_at
    )


def may_reclaim(quota: QuotaSnap, job: JobSnap, r: RunningSnap) -> bool:
    """The lender's `reclaim_within_tree` (Kueue's reclaimWithinCohort): Any borrower,
    LowerPriority ones only, or Never. Its own quota's borrowers are always reclaimable."""
    if r.quota_id == quota.id or quota.reclaim_within_tree not in ("LowerPriority", "Never"):
        return True  # Any (today's rule), also when unset
    return quota.reclaim_within_tree == "LowerPriority" and r.priority < job.priority


def _candidates(
    job: JobSnap, quota: QuotaSnap, short: _Short, state: _Working
) -> tuple[list[RunningSnap], str]:
    """Who the table lets `job` preempt, and (worded) who is kept by a protection rule.
    Borrowers charged to the quota; when the job fits its quota's guarantee, also borrowers
    of its tenant charged to other lenders of the pool, for the GPUs its gang needs (reclaim
    does not depend on which lender a borrower happened to be charged to; a victim that
    frees neither charge nor a needed GPU is dropped again); in-quota jobs by its policy."""
    min_runtime = state.options.min_runtime_before_reclaim_s
    cap = state.options.max_preemptions_per_hour
    found: list[RunningSnap] = list(state.charged_to.get(quota.id, ()))
    if _short_of_placement(job, quota, short, state):  # not of guarantee: GPUs to place it
        found += [r for r in state.pool_borrowers(quota) if quota.id not in r.lenders]
    candidates: list[RunningSnap] = []
    kept: list[tuple[float, str]] = []  # (order: charged here first, then soonest free, why)
    for r in found:
        if r.id in state.victims or r.id in state.moved:
            continue
        owner, far = _owner(r, state), 0.0 if quota.id in r.lenders else 1e17
        if not r.stopping and preempted_within_hour(r, state.now) >= cap:
            if not r.in_quota:  # preempted often enough this hour: it keeps running
                kept.append(
                    (far, f"borrower of {owner} was preempted {cap} times in the last hour")
                )
            continue
        if not r.in_quota:
            if not may_reclaim(quota, job, r):
                why = f"borrower of {owner} has priority {r.priority}, not below {job.priority}"
                kept.append(
                    (far + 1e15, f"{why} (reclaim within tree: {quota.reclaim_within_tree})")
                )
            elif reclaimable(r, state.now, min_runtime):
                candidates.append(r)
            else:  # the rule and its length, never a countdown (written every cycle)
                why = f"borrower of {owner} is inside its minimum runtime before reclaim"
                kept.append((far + min_runtime - _ran(r, state.now), f"{why} ({min_runtime:g} s)"))
        elif within_quota_victim(quota, job, r):
            candidates.append(r)
    kept.sort(key=lambda k: k[0])
    more = f" (and {_n(len(kept) - 1, 'more borrower')})" if len(kept) > 1 else ""
    return candidates, (kept[0][1] + more if kept else "")


def _short_of_placement(job: JobSnap, quota: QuotaSnap, short: _Short, state: _Working) -> bool:
    """Fits its quota's guarantee but no gang placement is free (or its quota lent the room
    and no placement is free either): borrowers anywhere in the pool may be in its way."""
    if short.pool is not None:
        return True
    if not short.lent:
        return False
    pool = state.capacity.pool(quota.pool)
    return pool is not None and pool.find(job.shape, job.excluded_node_ids) is None


def _owner(r: RunningSnap, state: _Working) -> str:
    q = state.quotas.get(r.quota_id)
    return q.name if q is not None else f"quota #{r.quota_id}"


def _ran(r: RunningSnap, now) -> float:
    return 0.0 if r.started_at is None else (now - r.started_at).total_seconds()


def _tier(quota: QuotaSnap, state: _Working):
    """The decision table's order: borrowers before in-quota jobs; among borrowers, those
    whose quota is farthest from the lender in the tree first (its own quota's last)."""
    tree = state.tree.tree

    def tier(v: RunningSnap) -> tuple[int, int]:
        if v.in_quota:
            return (1, 0)
        if v.quota_id not in tree.quotas or quota.id not in tree.quotas:
            return (0, -99)
        return (0, -len(tree.common_ancestor_below(v.quota_id, quota.id)))

    return tier
