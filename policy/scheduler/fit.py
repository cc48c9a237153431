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

On a quota tree (`tree`: the tenant's quotas of the pool; docs/quota-tree.md "Refusals") the
guarantee that counts is the quota's *own* (its `gpus` less its children's), any job above
the tightest `max_gpus` on its path is refused, and a Lingjun idle job is measured against
what its borrowing scope could ever lend it, lending limits included. Without a tree, or on
a flat one, the rules and messages are exactly the flat ones.
"""

from dataclasses import dataclass, replace

from policy.scheduler.model import QuotaSnap
from policy.scheduler.scope import lending_limited, scope_capacity
from policy.scheduler.tree import QuotaTree
from policy.statuses import IdleResources
from protocol import words

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
    id: int = 0  # the quota's id in `tree` (never_fits' keyword), where one is given


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
    quota's pool (`quota.id` among them), for the tree's rules."""
    quotas = QuotaTree.of(q for q in tree if q.pool == (quota.resource_type, quota.gpu_type))
    if quota.id in quotas.quotas and _is_tree(quotas):
        beyond = _beyond_tree(
            quota, quotas, workers, gpus_per_worker, cpus_per_worker, memory_gb_per_worker, idle
        )
    else:
        if quota.id in quotas.quotas:  # a flat pool: the same numbers as without a tree
            pooled = tuple(q.gpus for q in quotas.quotas.values())
            quota = replace(quota, tenant_gpus=sum(pooled), tenant_quota_gpus=pooled)
        beyond = _beyond_quota(
            quota, workers, gpus_per_worker, cpus_per_worker, memory_gb_per_worker, idle
        )
    return beyond or _beyond_pool(quota, workers, gpus_per_worker, node_gpus)


def _is_tree(quotas: QuotaTree) -> bool:
    """Whether any quota has a parent or a limit: otherwise the flat rules say it all."""
    return bool(quotas.children) or any(
        q.max_gpus is not None or q.lending_limit is not None for q in quotas.quotas.values()
    )


def _beyond_tree(
    quota: QuotaSize,
    tree: QuotaTree,
    workers: int,
    gpus_per_worker: int,
    cpus_per_worker: int,
    memory_gb_per_worker: int,
    idle: IdleResources | str,
) -> str | None:
    gpus = workers * gpus_per_worker
    need = f"{words.gpus(gpus)} ({_workers(workers)} of {gpus_per_worker})"
    own = tree.own_gpus(quota.id)
    borrows = quota.resource_type == LINGJUN and IdleResources(idle) != IdleResources.OFF
    if not borrows and gpus > own:  # guaranteed pods use only the own guarantee
        carved = tree.quotas[quota.id].gpus - own
        if not carved:
            return _beyond_quota(
                quota, workers, gpus_per_worker, cpus_per_worker, memory_gb_per_worker, idle
            )
        return (
            f"The job needs {need}; quota {quota.name} guarantees {own} of its own "
            f"({carved} of its {own + carved} are carved out by its children), "
            "so it could never start."
        )
    limit = tree.limit(quota.id)
    if limit is not None and gpus > limit[0]:
        return (
            f"Quota {tree.quotas[limit[1]].name}: limit {words.gpus(limit[0])}, job needs {need}, "
            "so it could never start."
        )
    if not borrows:
        return _beyond_quota(
            replace(quota, gpus=max(quota.gpus, gpus)),  # GPUs checked above; CPUs, memory
            workers,
            gpus_per_worker,
            cpus_per_worker,
            memory_gb_per_worker,
            idle,
        )
    scope = f"the {quota.gpu_type} quotas that quota {quota.name} may borrow from"
    limits = " (lending limits included)" if lending_limited(tree) else ""
    lendable = scope_capacity(tree, quota.id)
    if gpus > lendable:
        return (
            f"The job needs {need}; {scope} could lend it {words.gpus(lendable)} at most{limits}, "
            "so it could never start."
        )
    hosts = scope_capacity(tree, quota.id, gpus_per_worker) if gpus_per_worker else workers
    if gpus > own and hosts < workers:
        return (
            f"The job needs {_workers(workers)} of {words.gpus(gpus_per_worker)}; each worker is "
            f"charged to one quota, and {scope} can hold {_workers(hosts)} of that size at "
            f"most{limits}, so it could never start."
        )
    return None


def _beyond_pool(
    quota: QuotaSize, workers: int, gpus_per_worker: int, node_gpus: tuple[int, ...] | None
) -> str | None:
    if node_gpus is None or not gpus_per_worker:
        return None
    hosts = sum(n // gpus_per_worker for n in node_gpus)
    if 0 < hosts < workers:  # (0: a worker larger than any node, the node check's error)
        return (
            f"The job needs {_workers(workers)} of {words.gpus(gpus_per_worker)}; the "
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
                f"The job needs {words.gpus(gpus)} ({_workers(workers)} of {gpus_per_worker}); "
                f"all {quota.gpu_type} quotas of this tenant have {pooled} in all, "
                "so it could never start."
            )
        if quota.tenant_quota_gpus and gpus_per_worker and gpus > quota.gpus:
            hosts = sum(q // gpus_per_worker for q in quota.tenant_quota_gpus)
            if hosts < workers:
                return (
                    f"The job needs {_workers(workers)} of {words.gpus(gpus_per_worker)}; "
                    f"each worker is charged to one quota, and the {quota.gpu_type} quotas of "
                    "this tenant "
                    f"can hold {_workers(hosts)} of that size at most, so it could never start."
                )
        return None
    checks = [("GPU", quota.gpus, gpus, gpus_per_worker)]
    if quota.cpus:
        checks.append(("CPU", quota.cpus, workers * cpus_per_worker, cpus_per_worker))
    if quota.memory_gb:
        checks.append(
            ("GB memory", quota.memory_gb, workers * memory_gb_per_worker, memory_gb_per_worker)
        )
    for unit, size, need, each in checks:
        if need > size:
            many = unit if unit == "GB memory" else ""
            return (
                f"The job needs {words.plural(need, unit, many)} ({_workers(workers)} of {each}); "
                f"quota {quota.name} has {size} in all, so it could never start."
            )
    return None
