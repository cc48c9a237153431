"""Jobs that can never fit their quota, refused at submission (pure; docs/scheduling.md).

One rule for the create form (and so the API) and the simulator's `refused` event:
- an `Off` job, and any General-purpose job, needing more GPUs (or guaranteed CPUs or
  memory, where the quota limits them) than its quota has: its guarantee can never hold it
  and idle capacity of a General-purpose quota is that same quota;
- a Lingjun idle job (`Acceptable`, `Only Idle Resources`) needing more GPUs than all its
  tenant's quotas of that GPU type together: no set of lenders can ever hold it; nor more
  workers than those quotas hold whole (each pod is charged to one lender, so 1 worker of
  6 GPUs never runs on two quotas of 5);
- a gang the pool's registered nodes could not host even when empty.
(A worker larger than any node is the form's node check, and an invalid scenario.)
"""

from dataclasses import dataclass

from jobs.scheduler.model import QuotaSnap
from jobs.scheduler.tree import QuotaTree
from jobs.statuses import IdleResources

LINGJUN = "Lingjun"


@dataclass(frozen=True, slots=True)
class QuotaSize:
    name: str
    resource_type: str
    gpu_type: str
    gpus: int
    cpus: int = 0  # 0: the quota does not limit CPUs
    memory_gb: int = 0
    # GPUs of all the tenant's quotas of the same resource and GPU type, this one included.
    tenant_gpus: int = 0
    # The same quotas' GPUs one by one, where known (the whole-worker check); () = unknown.
    tenant_quota_gpus: tuple[int, ...] = ()
    id: int | None = None  # the quota's id in `tree` (never_fits' tree check)


def _workers(n: int) -> str:
    return "1 worker" if n == 1 else f"{n} workers"


def never_fits(
    quota: QuotaSize,
    *,
    workers: int,
    gpus_per_worker: int,
    cpus_per_worker: int = 0,
    memory_gb_per_worker: int = 0,
    idle: IdleResources | str = IdleResources.OFF,
    node_gpus: tuple[int, ...] | None = None,
    tree: tuple[QuotaSnap, ...] = (),
) -> str | None:
    """The error a user sees for a job that could never start on this quota, or None.
    `node_gpus`: GPUs of each registered node of the quota's pool, when known: a gang the
    whole pool could not host even empty is refused too. `tree`: the tenant's quotas of the
    pool (docs/quota-tree.md), when known: limits and own guarantees are checked too."""
    return (
        _beyond_tree(quota, tree, workers, gpus_per_worker, idle)
        or _beyond_quota(
            quota, workers, gpus_per_worker, cpus_per_worker, memory_gb_per_worker, idle
        )
        or _beyond_pool(quota, workers, gpus_per_worker, node_gpus)
    )


def _beyond_tree(
    quota: QuotaSize,
    quotas: tuple[QuotaSnap, ...],
    workers: int,
    per: int,
    idle: IdleResources | str,
) -> str | None:
    """A `max_gpus` on the quota's path below the job; a guaranteed job above its own
    guarantee; a Lingjun idle job above what its nearest-first scope could ever lend."""
    if not quotas or quota.id is None:
        return None
    tree = QuotaTree.of(quotas)
    if quota.id not in tree.quotas:
        return None
    gpus = workers * per
    limit = tree.limit(quota.id)
    if limit is not None and gpus > limit[0]:
        name = tree.quotas[limit[1]].name
        return (
            f"The job needs {gpus} GPUs; {name} has a limit of {limit[0]}, so it could never start."
        )
    if quota.resource_type == LINGJUN and IdleResources(idle) != IdleResources.OFF:
        roots = [q for q in tree.quotas if tree.parent(q) is None]
        ever = sum(_lendable_ever(tree, r, quota.id) for r in roots)
        if gpus > ever:
            return (
                f"The job needs {gpus} GPUs; the quotas it may borrow from could lend "
                f"{ever} at most, so it could never start."
            )
        hosts = sum(_lendable_alone(tree, q, quota.id) // per for q in tree.quotas) if per else 0
        if per and hosts < workers:
            return (
                f"The job needs {_workers(workers)} of {per} GPUs; each worker is charged to "
                f"one quota, and the quotas it may borrow from can hold {_workers(hosts)} of "
                "that size at most, so it could never start."
            )
        return None
    own = tree.own_gpus(quota.id)
    if gpus > own and own < quota.gpus:  # (equal to quota.gpus: _beyond_quota words it)
        return (
            f"The job needs {gpus} GPUs; quota {quota.name} guarantees {own} of its own "
            "(its children hold the rest), so it could never start."
        )
    return None


def _lendable_alone(tree: QuotaTree, lender: int, borrower: int) -> int:
    """The most one lender's own guarantee could ever give a job of `borrower`, within the
    lending limit of each subtree the loan leaves (each taken alone)."""
    room = tree.own_gpus(lender)
    for a in tree.common_ancestor_below(lender, borrower):
        limit = tree.quotas[a].lending_limit
        if limit is not None:
            room = min(room, limit)
    return room


def _lendable_ever(tree: QuotaTree, top: int, borrower: int) -> int:
    """The most the subtree of `top` could ever give a job of `borrower`: every own
    guarantee in it, within the lending limit of each subtree the loan leaves."""
    total = tree.own_gpus(top) + sum(
        _lendable_ever(tree, c, borrower) for c in tree.children.get(top, ())
    )
    limit = tree.quotas[top].lending_limit
    if limit is not None and borrower not in tree.subtree(top):
        total = min(total, limit)
    return total


def _beyond_pool(
    quota: QuotaSize, workers: int, gpus_per_worker: int, node_gpus: tuple[int, ...] | None
) -> str | None:
    if node_gpus is None or not gpus_per_worker:
        return None
    hosts = sum(n // gpus_per_worker for n in node_gpus)
    if 0 < hosts < workers:  # (0: a worker larger than any node, the node check's error)
        return (
            f"The job needs {_workers(workers)} of {gpus_per_worker} GPUs; the "
            f"{quota.resource_type} {quota.gpu_type} nodes can host {hosts} at most, "
            "so it could never start."
        )
    return None


def _beyond_quota(
    quota: QuotaSize,
    workers: int,
    gpus_per_worker: int,
    cpus_per_worker: int,
    memory_gb_per_worker: int,
    idle: IdleResources | str,
) -> str | None:
    gpus = workers * gpus_per_worker
    if quota.resource_type == LINGJUN and IdleResources(idle) != IdleResources.OFF:
        pooled = max(quota.tenant_gpus, quota.gpus)
        if gpus > pooled:
            return (
                f"The job needs {gpus} GPUs ({_workers(workers)} of {gpus_per_worker}); "
                f"all {quota.gpu_type} quotas of this tenant have {pooled} in all, "
                "so it could never start."
            )
        if quota.tenant_quota_gpus and gpus_per_worker and gpus > quota.gpus:
            hosts = sum(q // gpus_per_worker for q in quota.tenant_quota_gpus)
            if hosts < workers:
                return (
                    f"The job needs {_workers(workers)} of {gpus_per_worker} GPUs; each worker "
                    f"is charged to one quota, and the {quota.gpu_type} quotas of this tenant "
                    f"can hold {_workers(hosts)} of that size at most, so it could never start."
                )
        return None
    checks = [("GPUs", quota.gpus, gpus, gpus_per_worker)]
    if quota.cpus:
        checks.append(("CPUs", quota.cpus, workers * cpus_per_worker, cpus_per_worker))
    if quota.memory_gb:
        checks.append(
            ("GB memory", quota.memory_gb, workers * memory_gb_per_worker, memory_gb_per_worker)
        )
    for unit, size, need, each in checks:
        if need > size:
            return (
                f"The job needs {need} {unit} ({_workers(workers)} of {each}); "
                f"quota {quota.name} has {size} in all, so it could never start."
            )
    return None
