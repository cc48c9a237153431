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
        state.tree.borrowed[quota.id] = state.tree.borrowed.get(quota.id, 0) - r.gpus
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
    """Reclaim or priority-preempt for a guaranteed job. Returns its waiting reason, or
    None when no set of victims would make room."""
    memo = (quota.id, job.priority, job.shape)
    if memo in state.no_victims:
        return None
    lower = quota.preemption == "LowerPriority"
    if short.pool is None and not short.lent and not lower:
        return None  # short of its own guarantee: only priority preemption helps
    min_runtime = state.options.min_runtime_before_reclaim_s
    cap = state.options.max_preemptions_per_hour
    candidates: list[RunningSnap] = []
    protected = 0
    for r in state.charged_to.get(quota.id, ()):
        if r.id in state.victims or r.id in state.moved:
            continue
        if not r.stopping and preempted_within_hour(r, state.now) >= cap:
            protected += not r.in_quota
            continue  # preempted often enough this hour: it keeps running
        if not r.in_quota:
            if reclaimable(r, state.now, min_runtime):
                candidates.append(r)
            else:
                protected += 1
        elif lower and r.quota_id == quota.id and r.priority < job.priority:
            candidates.append(r)
    pool = state.capacity.pool(quota.pool)
    if not candidates or pool is None:
        state.no_victims.add(memo)
        if protected:
            return (
                f"quota {quota.name}: capacity lent to idle jobs; "
                f"{_n(protected, 'borrower')} protected by the minimum runtime before reclaim"
            )
        return None
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

    choice = choose_victims(job, candidates, eligible, state.now)
    if choice is None:
        state.no_victims.add(memo)
        return None
    for v in choice.victims:
        state.victims.add(v.id)
        if v.in_quota:
            why = f"preempted by higher-priority {job.label} in quota {quota.name}"
        else:
            why = f"reclaimed by {quota.name} for {job.label}"
        if not v.stopping:
            state.preemptions.append(Preemption(v.id, job.id, why, reclaim=not v.in_quota))
    # Freed GPUs are for this job: nothing else is placed on those nodes in this plan.
    pool.reserve({node_id for v in choice.victims for node_id, _ in v.gpus_by_node})
    state.reclaiming.add(quota.id)
    return f"waiting for {_n(len(choice.victims), 'preempted job')} to release their GPUs"
