"""Builders for hand-made snapshots: short to write, explicit about what matters."""

from datetime import UTC, datetime, timedelta

from policy.scheduler.model import JobSnap, NodeSnap, QuotaSnap, RunningSnap, Snapshot
from policy.statuses import IdleResources, JobStatus

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
LINGJUN = "Lingjun"
GENERAL = "General-purpose"


def node(
    id: int,
    *,
    gpus: int = 8,
    free: tuple[int, ...] | None = None,
    gpu_type: str = "H200",
    resource_type: str = LINGJUN,
    cpus: int = 128,
    memory_gb: int = 1024,
    schedulable: bool = True,
    why: str = "",
    name: str | None = None,
) -> NodeSnap:
    return NodeSnap(
        id=id,
        name=name or f"node-{id}",
        gpu_type=gpu_type,
        resource_type=resource_type,
        free_gpu_indices=tuple(range(gpus)) if free is None else free,
        gpus=gpus,
        free_cpus=cpus,
        free_memory_gb=memory_gb,
        schedulable=schedulable,
        unschedulable_reason=why if not schedulable else "",
    )


def quota(
    id: int = 1,
    *,
    name: str = "team-a",
    gpus: int = 16,
    used: int = 0,
    gpu_type: str = "H200",
    resource_type: str = LINGJUN,
    tenant: int = 1,
    **extra,
) -> QuotaSnap:
    return QuotaSnap(
        id=id,
        name=name,
        tenant_id=tenant,
        resource_type=resource_type,
        gpu_type=gpu_type,
        gpus=gpus,
        used_gpus=used,
        **extra,
    )


def job(
    id: int,
    *,
    quota: int = 1,
    workers: int = 1,
    gpus: int = 1,
    cpus: int = 4,
    memory_gb: int = 16,
    priority: int = 1,
    at: int = 0,
    status: JobStatus = JobStatus.PENDING,
    idle: IdleResources = IdleResources.OFF,
    active_pods: int = 0,
    name: str = "",
) -> JobSnap:
    """`at` is the submit time in minutes after T0."""
    return JobSnap(
        id=id,
        quota_id=quota,
        workers=workers,
        gpus_per_worker=gpus,
        cpus_per_worker=cpus,
        memory_gb_per_worker=memory_gb,
        priority=priority,
        submitted_at=T0 + timedelta(minutes=at),
        status=status,
        idle_resources=idle,
        active_pods=active_pods,
        name=name,
    )


def running(
    id: int,
    *,
    on: dict[int, int],
    quota: int = 1,
    charged: int | None = None,
    in_quota: bool = False,
    priority: int = 1,
    started: int | None = 0,
    checkpoint: int | None = None,
    stopping: bool = False,
) -> RunningSnap:
    """A placed job: `on` = {node id: GPUs}; `started`/`checkpoint` in minutes after T0."""
    return RunningSnap(
        id=id,
        quota_id=quota,
        charged_quota_id=charged if charged is not None else quota,
        in_quota=in_quota,
        priority=priority,
        gpus_by_node=tuple(on.items()),
        started_at=None if started is None else T0 + timedelta(minutes=started),
        last_checkpoint_at=None if checkpoint is None else T0 + timedelta(minutes=checkpoint),
        stopping=stopping,
    )


def snapshot(nodes=(), quotas=None, jobs=(), running=()) -> Snapshot:
    return Snapshot(
        nodes=tuple(nodes),
        quotas=tuple(quotas if quotas is not None else [quota()]),
        jobs=tuple(jobs),
        running=tuple(running),
    )
