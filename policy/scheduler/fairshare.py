"""Weighted fair-share preemption between borrowers (docs/quota-tree.md), for tenants that
turned it on (`Tenant.fair_share_preemption`, copied to each `QuotaSnap`). Pure.

An idle job that found no idle capacity may preempt borrowers of *other* quotas charged to a
lender in its own scope, but only when its quota's share after admission (borrowed GPUs plus
the job's, over its weight) stays at or below the victim's quota's share before: Kueue's
rule, under which no pair of quotas can preempt each other back. Never inside the minimum
runtime, never past the per-hour cap, never an in-quota pod. Victims are chosen by
`preempt.choose_victims` (least work lost first) for one lender at a time, nearest first."""

from policy.scheduler.model import JobSnap, Preemption, QuotaSnap, RunningSnap
from policy.scheduler.preempt import choose_victims, preempted_within_hour, reclaimable
from policy.scheduler.reasons import _n
from policy.scheduler.working import _Working, scope_of
from protocol import words


def fair_share_preempt(job: JobSnap, quota: QuotaSnap, state: _Working) -> str | None:
    """Preempt borrowers for the job's fair share. Returns its waiting reason, or None."""
    if not quota.fair_share_preemption:
        return None
    pool = state.capacity.pool(quota.pool)
    if pool is None:
        return None
    after = state.tree.share(quota.id, job.total_gpus)
    for lender in scope_of(quota, state):
        if lender.id in state.reclaiming:
            continue
        candidates = _candidates(lender, quota, after, state)
        if not candidates:
            continue
        room = lender.gpus - state.usage[lender.id].gpus - state.demand.get(lender.id, 0)
        budget = state.tree.loan_room(lender.id, quota.id)

        def eligible(victims, lender=lender, room=room, budget=budget) -> bool:
            freed = sum(v.gpus_charged_to(lender.id) for v in victims)
            if room + freed < job.total_gpus:
                return False
            if budget is not None and budget[0] < job.total_gpus:
                return False  # (victims' loans may leave other subtrees: kept strict)
            by_node: dict[int, int] = {}
            for v in victims:
                for node_id, g in v.gpus_by_node:
                    by_node[node_id] = by_node.get(node_id, 0) + g
            return pool.placeable_with(
                by_node, job.gpus_per_worker, job.workers, job.excluded_node_ids
            )

        choice = choose_victims(job, candidates, eligible, state.now)
        if choice is None:
            continue
        for v in choice.victims:
            state.victims.add(v.id)
            if not v.stopping:
                victim_quota = state.quotas[v.quota_id]
                why = (
                    f"preempted for the fair share of quota {quota.name} ({job.label}): "
                    f"{words.plural(float(after), 'GPU')} per weight after, "
                    f"{state.tree.share(v.quota_id):g} for "
                    f"quota {victim_quota.name} before"
                )
                state.preemptions.append(Preemption(v.id, job.id, why, reclaim=False))
        pool.reserve({node_id for v in choice.victims for node_id, _ in v.gpus_by_node})
        state.reclaiming.add(lender.id)
        return f"waiting for {_n(len(choice.victims), 'preempted job')} to release their GPUs"
    return None


def _candidates(
    lender: QuotaSnap, quota: QuotaSnap, after: float, state: _Working
) -> list[RunningSnap]:
    min_runtime = state.options.min_runtime_before_reclaim_s
    cap = state.options.max_preemptions_per_hour
    out = []
    for r in state.charged_to.get(lender.id, ()):
        if r.in_quota or r.quota_id == quota.id or r.id in state.moved:
            continue
        if r.id in state.victims and not r.stopping:
            continue
        if r.quota_id not in state.quotas or state.tree.share(r.quota_id) < after:
            continue  # no flapping: only quotas whose share stays above ours after
        if not r.stopping and (
            preempted_within_hour(r, state.now) >= cap or not reclaimable(r, state.now, min_runtime)
        ):
            continue
        out.append(r)
    return out
