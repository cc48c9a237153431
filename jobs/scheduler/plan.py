"""The scheduler's core: `plan(snapshot, now) -> Plan`, pure (DESIGN §5).

Cut into small pieces with their own table tests, composed in `plan()`:
- `admission_order`: who is looked at first (priority, then submit time, then id);
- `quota_shortfall`: does the job fit its quota's guarantee;
- `PoolIndex.find/take` (placement.py): where the gang goes;
- `diagnose_placement`: why it does not fit, in words a researcher can act on;
- `describe_placements`: the admission's event text.

This version admits guaranteed jobs only (idle resources and preemption come later) and
backfills greedily: a job that cannot be placed does not hold back later, smaller jobs.
`PlanOptions.backfill=False` is the hook for a reservation rule: the first job that cannot
be placed then holds its pool for itself.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter

from jobs.scheduler.model import (
    Admission,
    JobSnap,
    Placement,
    Plan,
    PoolKey,
    QueueDecision,
    QuotaSnap,
    Snapshot,
)
from jobs.scheduler.placement import CapacityIndex, PoolIndex
from jobs.statuses import IdleResources


@dataclass(frozen=True, slots=True)
class PlanOptions:
    backfill: bool = True


@dataclass(slots=True)
class Usage:
    """What a quota's guaranteed jobs hold, counting admissions made earlier in this plan."""

    gpus: int = 0
    cpus: int = 0
    memory_gb: int = 0


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _gpus(count: int, gpu_type: str) -> str:
    return f"{count} {gpu_type} GPU" if count == 1 else f"{count} {gpu_type} GPUs"


# -- admission order ------------------------------------------------------------------------
def admission_order(jobs: Iterable[JobSnap]) -> list[JobSnap]:
    """Higher priority first; FIFO by submit time inside a priority; id breaks ties."""
    # Three stable sorts on single attributes: the same order as one sort on the tuple
    # (-priority, submitted_at, id), about 3x faster on a queue of 50,000.
    ordered = sorted(jobs, key=attrgetter("id"))
    ordered.sort(key=attrgetter("submitted_at"))
    ordered.sort(key=attrgetter("priority"), reverse=True)
    return ordered


# -- quota fit ------------------------------------------------------------------------------
def quota_shortfall(quota: QuotaSnap, used: Usage, job: JobSnap) -> str | None:
    """Why the job does not fit its quota's guarantee now, or None if it does."""
    checks = [("GPUs", quota.gpus, used.gpus, job.total_gpus)]
    if quota.cpus:  # 0 = the quota does not limit CPUs
        checks.append(("CPUs", quota.cpus, used.cpus, job.workers * job.cpus_per_worker))
    if quota.memory_gb:
        checks.append(
            ("GB memory", quota.memory_gb, used.memory_gb, job.workers * job.memory_gb_per_worker)
        )
    for unit, size, in_use, need in checks:
        if need > size:
            return f"quota {quota.name} has {size} {unit} in all; job needs {need}"
        if in_use + need > size:
            return f"quota {quota.name}: {in_use}/{size} {unit} in use, job needs {need}"
    return None


# -- diagnosis ------------------------------------------------------------------------------
def diagnose_unschedulable_pool(key: PoolKey, unschedulable: dict[str, int] | None) -> str:
    resource_type, gpu_type = key
    if not unschedulable:
        return f"no {resource_type} {gpu_type} nodes in the cluster"
    parts = ", ".join(f"{count} {why}" for why, count in sorted(unschedulable.items()))
    return f"no schedulable {resource_type} {gpu_type} node ({parts})"


def diagnose_placement(pool: PoolIndex, job: JobSnap) -> str:
    """Why the gang cannot be placed in this pool now (called after `find` said no)."""
    gpu_type = pool.key[1]
    workers, gpus = job.workers, job.gpus_per_worker
    if gpus > pool.max_node_gpus:
        return (
            f"needs {_gpus(gpus, gpu_type)} per worker; "
            f"the largest {gpu_type} node has {pool.max_node_gpus}"
        )
    by_gpus = pool.placeable_by_gpus(gpus, workers)
    if by_gpus == 0:
        largest = pool.largest_free_block()
        tail = f"largest free block is {largest}" if largest else f"all {gpu_type} GPUs are in use"
        return f"no node has {gpus} free {gpu_type} GPU{'s' if gpus != 1 else ''}; {tail}"
    if by_gpus < workers:  # (CPU-only workers never get here: GPUs do not limit them)
        size = _gpus(gpus, gpu_type)
        return f"needs {workers} workers of {size}; only {by_gpus} can be placed now"
    # Enough free GPUs: CPUs or memory on those nodes are the limit.
    fits = pool.placeable(job.shape)
    want = f"{job.cpus_per_worker} CPUs and {job.memory_gb_per_worker} GB memory"
    if gpus:
        want = f"{_gpus(gpus, gpu_type)}, {want}"
    if workers == 1 or fits == 0:
        return f"no node has {want} free"
    return f"needs {workers} workers of {want}; only {fits} can be placed now (CPU or memory)"


def format_indices(indices: Iterable[int]) -> str:
    """(0, 1, 2, 3, 6) -> "0-3,6"."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def describe_placements(placements: tuple[Placement, ...], names: dict[int, str]) -> str:
    """ "placed on node-0 (GPUs 0-3)"; "placed 2 workers on node-0 (GPUs 0-7), node-1 (…)"."""
    by_node: dict[int, list[int]] = {}
    for p in placements:
        by_node.setdefault(p.node_id, []).extend(p.gpu_indices)

    def gpus(idx: list[int]) -> str:
        if not idx:
            return "no GPUs"
        return f"GPU{'s' if len(idx) > 1 else ''} {format_indices(idx)}"

    where = ", ".join(
        f"{names.get(node_id, f'node #{node_id}')} ({gpus(idx)})"
        for node_id, idx in by_node.items()
    )
    if len(placements) == 1:
        return f"placed on {where}"
    return f"placed {_n(len(placements), 'worker')} on {where}"


# -- composition ----------------------------------------------------------------------------
@dataclass(slots=True)
class _Working:
    """Mutable state of one plan() call; nothing outlives it."""

    options: PlanOptions
    quotas: dict[int, QuotaSnap]
    usage: dict[int, Usage]
    capacity: CapacityIndex
    # First job of each pool that could not be placed: what a reservation rule holds for.
    blocked_by: dict[PoolKey, int] = field(default_factory=dict)
    # Placement diagnoses by (pool, shape): a long queue of same-sized jobs that cannot
    # fit is diagnosed once, not once per job.
    diagnoses: dict[tuple, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Short:
    """A job that waits for quota or for GPUs; worded once the plan is complete."""

    quota: QuotaSnap
    pool: PoolIndex | None = None  # None: short of quota; else: no placement in this pool


def plan(snapshot: Snapshot, now: datetime, options: PlanOptions | None = None) -> Plan:
    """Decide which waiting jobs start where, and why the others wait.

    Reasons are worded against the state *after* this plan's admissions: that is what the
    next snapshot will show, so an unchanged cluster yields unchanged reasons and the cycle
    writes nothing. (Usage only grows within a plan, so a job short of quota or GPUs when
    it was looked at is still short at the end.) `now` is part of the contract (minimum
    runtimes, reclaim ages) though this version's rules do not depend on time.
    """
    state = _Working(
        options=options or PlanOptions(),
        quotas={q.id: q for q in snapshot.quotas},
        usage={q.id: Usage(q.used_gpus, q.used_cpus, q.used_memory_gb) for q in snapshot.quotas},
        capacity=CapacityIndex(snapshot.nodes),
    )
    order = admission_order(snapshot.jobs)
    admissions: list[Admission] = []
    waits: dict[int, str | _Short] = {}
    for job in order:
        result = _evaluate(job, state)
        if isinstance(result, Admission):
            admissions.append(result)
            used = state.usage[job.quota_id]
            used.gpus += job.total_gpus
            used.cpus += job.workers * job.cpus_per_worker
            used.memory_gb += job.workers * job.memory_gb_per_worker
        else:
            waits[job.id] = result

    positions: dict[int, int] = {}
    queued: list[QueueDecision] = []
    for job in order:
        wait = waits.get(job.id)
        if wait is not None:
            positions[job.quota_id] = positions.get(job.quota_id, 0) + 1
            reason = wait if isinstance(wait, str) else _word(wait, job, state)
            queued.append(QueueDecision(job.id, reason, positions[job.quota_id]))
    return Plan(admissions=tuple(admissions), queued=tuple(queued))


def _evaluate(job: JobSnap, state: _Working) -> Admission | str | _Short:
    """One job: an admission, or why it waits. Books capacity when admitted."""
    quota = state.quotas.get(job.quota_id)
    if quota is None:
        return f"quota #{job.quota_id} no longer exists"
    if job.idle_resources == IdleResources.ONLY:
        return "waits for idle resources; lending idle capacity is not enabled yet"
    if job.active_pods:
        return f"waiting for {_n(job.active_pods, 'worker')} of the previous attempt to exit"
    if quota_shortfall(quota, state.usage[quota.id], job):
        return _Short(quota)
    key = quota.pool
    pool = state.capacity.pool(key)
    if pool is None or pool.size == 0:
        return diagnose_unschedulable_pool(key, state.capacity.unschedulable.get(key))
    if not state.options.backfill and key in state.blocked_by:
        return f"waiting behind job #{state.blocked_by[key]}, which is first in line"
    shape = job.shape
    chosen = pool.find(shape)
    if chosen is None:
        state.blocked_by.setdefault(key, job.id)
        return _Short(quota, pool)
    placements = pool.take(chosen, shape)
    return Admission(
        job_id=job.id,
        placements=placements,
        charged_quota_id=quota.id,
        in_quota=True,
        reason=describe_placements(placements, state.capacity.names),
    )


def _word(short: _Short, job: JobSnap, state: _Working) -> str:
    # Checked in the same order as _evaluate, on the final state: a job that found no
    # placement may be short of quota by now (a smaller job of its quota backfilled).
    text = quota_shortfall(short.quota, state.usage[short.quota.id], job)
    if text or short.pool is None:
        return text or f"quota {short.quota.name} is full"
    memo = (short.pool.key, job.shape)
    if memo not in state.diagnoses:
        state.diagnoses[memo] = diagnose_placement(short.pool, job)
    return state.diagnoses[memo]
