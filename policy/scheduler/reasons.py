"""Why-pending wording and admission text (pure): what a researcher reads on the job page.

Quota checks say used/limit/needed; placement says what is missing ("no node has 8 free
H200 GPUs; largest free block is 4"). Split out of plan.py, which re-exports these names.
"""

from collections.abc import Iterable

from policy.scheduler.model import JobSnap, Placement, PoolKey
from policy.scheduler.placement import PoolIndex
from protocol import words


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _gpus(count: int, gpu_type: str) -> str:
    return words.gpus(count, gpu_type)


# -- diagnosis ------------------------------------------------------------------------------
def diagnose_unschedulable_pool(key: PoolKey, unschedulable: dict[str, int] | None) -> str:
    resource_type, gpu_type = key
    if not unschedulable:
        return f"no {resource_type} {gpu_type} nodes in the cluster"
    parts = ", ".join(f"{count} {why}" for why, count in sorted(unschedulable.items()))
    return f"no schedulable {resource_type} {gpu_type} node ({parts})"


def diagnose_never(pool: PoolIndex, job: JobSnap, unschedulable: dict[str, int] | None) -> str:
    """A gang the pool's schedulable nodes could not host even empty, or "" if they could:
    said plainly, so no one waits for it to start."""
    if job.gpus_per_worker > pool.max_node_gpus:
        return ""  # diagnose_placement names the largest node: plain enough
    # (Nodes excluded for this job are named by diagnose_excluded instead.)
    hosts = pool.hosts_when_drained(job.gpus_per_worker)
    if hosts >= job.workers:
        return ""
    gpu_type = pool.key[1]
    text = (
        f"can never be placed while the pool stays as it is: needs {_n(job.workers, 'worker')} of "
        f"{_gpus(job.gpus_per_worker, gpu_type)}; the schedulable {gpu_type} nodes can host "
        f"{hosts}"
    )
    if unschedulable:
        text += " (" + ", ".join(f"{n} {why}" for why, n in sorted(unschedulable.items())) + ")"
    return text


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
    if gpus == 0 and by_gpus == 0:
        return f"every schedulable {gpu_type} node is held for jobs that waited longer"
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


def diagnose_excluded(
    pool: PoolIndex, job: JobSnap, excluded: list[int], names: dict[int, str]
) -> str:
    """Why a job with excluded nodes (retry elsewhere) cannot be placed in this pool."""
    which = ", ".join(sorted(names.get(i, f"node #{i}") for i in excluded))
    note = f"{_n(len(excluded), 'node')} excluded after an ECC/Xid failure: {which}"
    if pool.find(job.shape) is not None:  # it would fit, but only on excluded nodes
        return f"no node this job may use has room ({note})"
    return f"{diagnose_placement(pool, job)} ({note})"


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
