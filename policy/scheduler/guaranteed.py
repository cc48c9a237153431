"""The guaranteed pass of `plan()` (docs/scheduling.md): `Off` and `Acceptable` jobs try their own
quota's guarantee and a gang placement; one that still waits may preempt
(`reclaim._preempt`) and, after `reserve_after_s`, holds what it waits for (the starvation
rule), but only while capacity that will free up could ever satisfy it."""

from policy.scheduler.model import Admission, JobSnap, QuotaSnap
from policy.scheduler.moves import move_borrowers
from policy.scheduler.reasons import _n, describe_placements, diagnose_unschedulable_pool
from policy.scheduler.reclaim import _preempt, victim_choice
from policy.scheduler.working import (
    Usage,
    _place,
    _Short,
    _Working,
    quota_shortfall,
    waited_long,
)
from policy.statuses import IdleResources

_DEFER = object()  # the job is looked at again in the idle pass


def _guaranteed_pass(job: JobSnap, state: _Working, deferred: dict) -> object:
    """First pass: everything but borrowing. Returns an admission, why the job waits, or
    _DEFER for a job that may borrow (its guaranteed result kept in `deferred`)."""
    quota = state.quotas.get(job.quota_id)
    if quota is None:
        return f"quota #{job.quota_id} no longer exists"
    if job.active_pods:
        return f"waiting for {_n(job.active_pods, 'worker')} of the previous attempt to exit"
    limited = state.tree.limit_short(quota.id, job.total_gpus)
    if limited:  # a `max_gpus` on its path: neither its guarantee nor idle capacity helps
        return limited
    if job.idle_resources == IdleResources.ONLY:
        deferred[job.id] = None
        return _DEFER
    result = _guaranteed(job, quota, state)
    if isinstance(result, Admission):
        return result
    if job.idle_resources == IdleResources.ACCEPTABLE:
        deferred[job.id] = result  # whichever comes first: idle capacity is tried next
        _keep_room(job, quota, result, state)
        return _DEFER
    return _wait_guaranteed(job, quota, result, state)


def _wait_guaranteed(
    job: JobSnap, quota: QuotaSnap, result: str | _Short, state: _Working
) -> str | _Short:
    """A guaranteed try failed: preempt if that makes room, else hold what it waits for."""
    if isinstance(result, _Short):
        waiting = _preempt(job, quota, result, state)
        if waiting:
            return waiting
        _hold(job, quota, result, state)
    return result


def _guaranteed(job: JobSnap, quota: QuotaSnap, state: _Working) -> Admission | str | _Short:
    used = state.usage[quota.id]
    # Fast path for a long queue on a full quota: guaranteed use only grows inside a plan,
    # so a GPU need at least as large as one that already did not fit cannot fit either.
    gpus_only = not quota.cpus and not quota.memory_gb
    claimant = state.claims.get(quota.id)
    if claimant is not None:
        return (
            f"waiting behind {claimant.label}, first in line for the GPUs being released "
            f"in quota {quota.name}"
        )
    if gpus_only and job.total_gpus >= state.full_at.get(quota.id, 1 << 62):
        return _Short(quota)
    if quota_shortfall(quota, used, job):
        if gpus_only:
            state.full_at[quota.id] = min(job.total_gpus, state.full_at.get(quota.id, 1 << 62))
        _claim_releasing(job, quota, state)
        return _Short(quota)
    holder = state.holds.get(quota.id)
    if holder is not None:
        return f"waiting behind {holder.label}, which has waited longest for quota {quota.name}"
    key = quota.pool
    pool = state.capacity.pool(key)
    if used.gpus + job.total_gpus > quota.gpus and not (
        # Lent out, but a placement is free: borrowers moved to other lenders give the
        # room back without a restart (docs/quota-tree.md, "move before preempting").
        pool is not None
        and pool.find(job.shape, job.excluded_node_ids) is not None
        and move_borrowers(quota, used.gpus + job.total_gpus - quota.gpus, job, state)
    ):
        _claim_releasing(job, quota, state)
        return _Short(quota, lent=True)
    if pool is None or pool.size == 0:
        return diagnose_unschedulable_pool(key, state.capacity.unschedulable.get(key))
    if not state.options.backfill and key in state.blocked_by:
        return f"waiting behind job #{state.blocked_by[key]}, which is first in line"
    placements = _place(job, pool, state)
    if placements is None:
        state.blocked_by.setdefault(key, job.id)
        return _Short(quota, pool)
    return Admission(
        job_id=job.id,
        placements=placements,
        charged_quota_id=quota.id,
        in_quota=True,
        reason=describe_placements(placements, state.capacity.names),
    )


def _keep_room(job: JobSnap, quota: QuotaSnap, result: str | _Short, state: _Working) -> None:
    """An `Acceptable` job short of its quota's guarantee tries idle capacity first and
    preempts only in the idle pass; until then the jobs behind it must not take the room it
    would preempt for: they would be its next victims, or hold it back a whole run (the
    Kueue baseline's large jobs waited behind medium ones that way). When the decision
    table gives it victims, the free part of what it needs is booked to it until the idle
    pass (docs/scheduling.md, "The head keeps its room") and its quota lends nothing."""
    if not isinstance(result, _Short) or result.pool is not None or quota.id in state.claims:
        return
    if any(quota_id == quota.id for quota_id, _ in state.kept.values()):
        return  # one head per quota keeps room
    choice, _ = victim_choice(job, quota, result, state)
    if choice is None:
        return
    room = job.total_gpus - sum(v.gpus_charged_to(quota.id) for v in choice.victims)
    if room > 0:
        state.usage[quota.id].gpus += room
        state.kept[job.id] = (quota.id, room)
        state.kept_changes += 1
        state.reclaiming.add(quota.id)


# -- claims on capacity being released ----------------------------------------------------
def _claim_releasing(job: JobSnap, quota: QuotaSnap, state: _Working) -> None:
    """The first job in line that the quota's GPUs being released would let start claims
    them: until it starts, later jobs of the quota do not start in quota and the quota lends
    nothing. Without the claim, a preemptor's freed GPUs go to whoever is looked at between
    its victims' exits, and it preempts again (the Kueue baseline looped like that). Derived
    from the snapshot each cycle, so a claim lasts exactly while the release does."""
    releasing_in_quota, releasing = state.releasing.get(quota.id, (0, 0))
    if not releasing or quota.id in state.claims:
        return
    used = state.usage[quota.id]
    # The quota once the release is done. CPUs and memory being released are not known
    # here: a job short of those does not claim (a claim must be backed by what frees up).
    after = Usage(
        used.gpus - releasing,
        used.cpus,
        used.memory_gb,
        used.borrowed - (releasing - releasing_in_quota),
    )
    if quota_shortfall(quota, after, job) or after.gpus + job.total_gpus > quota.gpus:
        return
    if _satisfiable(job, quota, state):
        state.claims[quota.id] = job
        state.reclaiming.add(quota.id)


# -- starvation -----------------------------------------------------------------------------
def _hold(job: JobSnap, quota: QuotaSnap, short: _Short, state: _Working) -> None:
    """The starvation rule (plan.py's docstring): a job that waited long holds what it needs."""
    if not waited_long(job, state):
        return
    if short.pool is None:
        if quota.id not in state.holds and _satisfiable(job, quota, state):
            state.holds[quota.id] = job
    # Only the first long waiter of a pool reserves: two reservations could deadlock. A job
    # that nothing freeing up would let start may never hold back others.
    elif (
        short.pool.key not in state.reserved_for
        and _satisfiable(job, quota, state)
        and short.pool.reserve_for(job.shape)
    ):
        state.reserved_for[short.pool.key] = job.id


def _never_in_quota(quota: QuotaSnap, job: JobSnap) -> bool:
    """More than the quota guarantees in all (refused at submission; may still reach here
    for jobs submitted before a quota shrank)."""
    return (
        job.total_gpus > quota.gpus
        or (bool(quota.cpus) and job.workers * job.cpus_per_worker > quota.cpus)
        or (bool(quota.memory_gb) and job.workers * job.memory_gb_per_worker > quota.memory_gb)
    )


def _satisfiable(job: JobSnap, quota: QuotaSnap, state: _Working) -> bool:
    """Could capacity that will free up (running jobs ending) ever start this job in its
    quota? Its guarantee must hold it and its pool's schedulable nodes host the gang."""
    if _never_in_quota(quota, job):
        return False
    pool = state.capacity.pool(quota.pool)
    if pool is None:
        return False
    excluded = job.excluded_node_ids
    return pool.hosts_when_drained(job.gpus_per_worker, excluded) >= job.workers
