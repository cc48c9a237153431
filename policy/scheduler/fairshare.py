"""Weighted fair-share preemption between borrowers (docs/quota-tree.md), for tenants that
turned it on (`Tenant.fair_share_preemption`, copied to each `QuotaSnap`). Pure.

An idle job that found no idle capacity may preempt borrowers of *other* quotas charged to a
lender in its own scope, but only when its quota's share after admission (borrowed GPUs plus
the job's, over its weight) is at most the victim's quota's share *after* losing the victims
(Kueue's LessThanOrEqualToFinalShare): preempting back would need the victim's quota's share
after readmitting a job to be at most ours after losing one, which is at most its own share
after losing: impossible for jobs of at least one GPU, so no pair of quotas preempts each
other back, whatever the cool-down (docs/scheduling.md, the decision table). Kueue's second
strategy (below the victim's share *before*) is left out on purpose: it lets a smaller job
preempt back. A quota with `borrow_within_tree_max_priority`
(Kueue's borrowWithinCohort) may also preempt borrowers of lower priority, at most that
threshold, whatever the shares. Never inside the minimum
runtime, never past the per-hour cap, never an in-quota pod. Victims are chosen by
`preempt.choose_victims` (least work lost first) for one lender at a time, nearest first."""

from policy.scheduler.model import JobSnap, Preemption, QuotaSnap, RunningSnap
from policy.scheduler.preempt import choose_victims, preempted_within_hour, reclaimable
from policy.scheduler.reasons import _n
from policy.scheduler.working import _Working, scope_of
from protocol import words


def fair_share_preempt(job: JobSnap, quota: QuotaSnap, state: _Working) -> str | None:
    """Preempt borrowers for the job's fair share. Returns its waiting reason, or None."""
    if not quota.fair_share_preemption and quota.borrow_within_tree_max_priority is None:
        return None
    pool = state.capacity.pool(quota.pool)
    if pool is None:
        return None
    after = state.tree.share(quota.id, job.total_gpus)
    for lender in scope_of(quota, state):
        if lender.id in state.reclaiming:
            continue
        candidates = _candidates(lender, quota, job, after, state)
        if not candidates:
            continue
        room = lender.gpus - state.usage[lender.id].gpus - state.demand.get(lender.id, 0)
        budget = state.tree.loan_room(lender.id, quota.id)

        def eligible(victims, lender=lender, room=room, budget=budget) -> bool:
            if not _shares_hold(victims, quota, job, after, state):
                return False
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
        state.held += 1
        for v in choice.victims:
            state.victims.add(v.id)
            if not v.stopping:
                why = _why(v, job, quota, after, state)
                state.preemptions.append(Preemption(v.id, job.id, why, reclaim=False))
        pool.reserve({node_id for v in choice.victims for node_id, _ in v.gpus_by_node})
        state.reclaiming.add(lender.id)
        return f"waiting for {_n(len(choice.victims), 'preempted job')} to release their GPUs"
    return None


def _why(v: RunningSnap, job: JobSnap, quota: QuotaSnap, after: float, state: _Working) -> str:
    victim_quota = state.quotas[v.quota_id]
    if _by_share(v, quota, after, state):
        return (
            f"preempted for the fair share of quota {quota.name} ({job.label}): "
            f"{words.plural(float(after), 'GPU')} per weight after, "
            f"{_final_share(v.quota_id, v.borrowed_gpus, state):g} for quota "
            f"{victim_quota.name} after losing this job"
        )
    return (
        f"preempted by {job.label} of quota {quota.name} borrowing within the tree "
        f"(priority {job.priority} over {v.priority})"
    )


def _final_share(quota_id: int, losing: int, state: _Working) -> float:
    """The quota's share after its borrowers lose `losing` borrowed GPUs."""
    return state.tree.share(quota_id, -losing)


def _by_share(v: RunningSnap, quota: QuotaSnap, after: float, state: _Working) -> bool:
    return quota.fair_share_preemption and after <= _final_share(v.quota_id, v.borrowed_gpus, state)


def _by_priority(v: RunningSnap, quota: QuotaSnap, job: JobSnap) -> bool:
    """borrowWithinCohort; ignored where fair-share preemption is on (as in Kueue): a
    priority preemption against the shares could be answered by a fair-share one back."""
    threshold = quota.borrow_within_tree_max_priority
    if threshold is None or quota.fair_share_preemption:
        return False
    return v.priority < job.priority and v.priority <= threshold


def _shares_hold(victims, quota: QuotaSnap, job: JobSnap, after: float, state: _Working) -> bool:
    """Every victim chosen by the share rule: its quota's share after losing *all* the
    chosen victims of that quota stays at or above the preemptor's share after."""
    losing: dict[int, int] = {}
    for v in victims:
        if not v.stopping and not _by_priority(v, quota, job):
            losing[v.quota_id] = losing.get(v.quota_id, 0) + v.borrowed_gpus
    return all(after <= _final_share(q, gpus, state) for q, gpus in losing.items())


def _candidates(
    lender: QuotaSnap, quota: QuotaSnap, job: JobSnap, after: float, state: _Working
) -> list[RunningSnap]:
    min_runtime = state.options.min_runtime_before_reclaim_s
    cap = state.options.max_preemptions_per_hour
    out = []
    for r in state.charged_to.get(lender.id, ()):
        if r.in_quota or r.quota_id == quota.id or r.id in state.moved:
            continue
        if r.id in state.victims and not r.stopping:
            continue
        if r.quota_id not in state.quotas:
            continue
        allowed = _by_share(r, quota, after, state) or _by_priority(r, quota, job)
        if not r.stopping and not allowed:
            continue  # no flapping: only quotas whose share after losing stays >= ours after
        if not r.stopping and (
            preempted_within_hour(r, state.now) >= cap or not reclaimable(r, state.now, min_runtime)
        ):
            continue
        out.append(r)
    return out
