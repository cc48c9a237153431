"""Jobs that can never fit their quota, refused at submission (pure; DESIGN §5).

One rule for the create form (and so the API) and the simulator's `refused` event:
- an `Off` job, and any General-purpose job, needing more GPUs (or guaranteed CPUs or
  memory, where the quota limits them) than its quota has: its guarantee can never hold it
  and idle capacity of a General-purpose quota is that same quota;
- a Lingjun idle job (`Acceptable`, `Only Idle Resources`) needing more GPUs than all its
  tenant's quotas of that GPU type together: no set of lenders can ever hold it.
(A worker larger than any node is the form's node check, and an invalid scenario.)
"""

from dataclasses import dataclass

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
) -> str | None:
    """The error a user sees for a job that could never start on this quota, or None."""
    gpus = workers * gpus_per_worker
    if quota.resource_type == LINGJUN and IdleResources(idle) != IdleResources.OFF:
        pooled = max(quota.tenant_gpus, quota.gpus)
        if gpus > pooled:
            return (
                f"The job needs {gpus} GPUs ({_workers(workers)} of {gpus_per_worker}); "
                f"all {quota.gpu_type} quotas of this tenant have {pooled} in all, "
                "so it could never start."
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
