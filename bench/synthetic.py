"""Synthetic clusters, queues and quota trees for the scheduler benchmarks (split out of
bench/scheduler.py; bench/forecast.py reads them too). Pure: plain snapshots, no Django."""

import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from policy.scheduler.model import JobSnap, NodeSnap, QuotaSnap, RunningSnap, Snapshot
from policy.statuses import IdleResources, JobStatus

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
POOLS = [("Lingjun", "H200"), ("Lingjun", "H100"), ("General-purpose", "A100")]


@dataclass(frozen=True)
class Size:
    name: str
    nodes: int
    jobs: int
    quotas: int
    gpus_per_node: int = 8


SIZES = {
    "small": Size("small", nodes=100, jobs=1_000, quotas=10),
    "medium": Size("medium", nodes=2_000, jobs=10_000, quotas=200),
    "large": Size("large", nodes=5_000, jobs=50_000, quotas=500),
}
DB_SIZE = Size("db", nodes=200, jobs=2_000, quotas=20)

# (workers, GPUs per worker) with weights: mostly single-node jobs, some 8-GPU gangs.
SHAPES = [((1, 1), 30), ((1, 2), 15), ((1, 4), 15), ((1, 8), 20), ((2, 8), 10), ((4, 8), 10)]


def _busy_gpus(rng: random.Random, gpus: int) -> int:
    """A cluster that is about 60% busy, fragmented the way real ones are."""
    return rng.choice([0, 0, gpus // 4, gpus // 2, gpus // 2, 3 * gpus // 4, gpus, gpus])


def synthetic_snapshot(
    size: Size, seed: int = 1, quota_factor: float = 1.0, idle_mix: float = 0.0
) -> Snapshot:
    """A fragmented cluster and a queue. quota_factor scales every quota: at 1 the quotas
    share the cluster and most waiting jobs are quota-bound; at 100 nearly every job goes
    through placement and waits for GPUs (the placement path's worst case).

    idle_mix > 0: that share of the busy blocks are borrowers (idle jobs charged, not in
    quota, to a quota of the same pool and tenant) and that share of the queue uses idle
    resources (half Acceptable, half Only); every busy block is a RunningSnap, so guaranteed
    jobs short of lent capacity go through victim selection (the reclaim path)."""
    rng = random.Random(seed)
    nodes = []
    capacity = dict.fromkeys(POOLS, 0)
    for i in range(size.nodes):
        resource_type, gpu_type = POOLS[i % len(POOLS)]
        busy = _busy_gpus(rng, size.gpus_per_node)
        free = tuple(sorted(rng.sample(range(size.gpus_per_node), size.gpus_per_node - busy)))
        capacity[(resource_type, gpu_type)] += size.gpus_per_node
        nodes.append(
            NodeSnap(
                id=i + 1,
                name=f"node-{i}",
                gpu_type=gpu_type,
                resource_type=resource_type,
                free_gpu_indices=free,
                gpus=size.gpus_per_node,
                free_cpus=128 - busy * 12,
                free_memory_gb=2048 - busy * 200,
                schedulable=rng.random() > 0.02,
                unschedulable_reason="cordoned",
            )
        )
    quotas = []
    for q in range(size.quotas):
        pool = POOLS[q % len(POOLS)]
        in_pool = len(range(q % len(POOLS), size.quotas, len(POOLS)))
        share = int(capacity[pool] * quota_factor) // max(1, in_pool)
        quotas.append(
            QuotaSnap(
                id=q + 1,
                name=f"quota-{q}",
                tenant_id=1 + q % 5,
                resource_type=pool[0],
                gpu_type=pool[1],
                gpus=share,
                used_gpus=int(share * rng.uniform(0.3, 0.8)),
            )
        )
    running: list[RunningSnap] = []
    if idle_mix:
        quotas, running = _charge_busy_blocks(rng, nodes, quotas, idle_mix)
    shapes, weights = zip(*SHAPES, strict=True)
    jobs = []
    for j in range(size.jobs):
        workers, gpus = rng.choices(shapes, weights)[0]
        jobs.append(
            JobSnap(
                id=j + 1,
                quota_id=rng.randrange(size.quotas) + 1,
                workers=workers,
                gpus_per_worker=gpus,
                cpus_per_worker=gpus * 8,
                memory_gb_per_worker=gpus * 100,
                priority=rng.choices([0, 1, 2, 5], [10, 60, 20, 10])[0],
                submitted_at=NOW - timedelta(seconds=rng.randrange(86_400)),
                status=JobStatus.INQUEUE if rng.random() < 0.7 else JobStatus.PENDING,
                idle_resources=_idle_mode(rng, idle_mix),
            )
        )
    return Snapshot(
        nodes=tuple(nodes), quotas=tuple(quotas), jobs=tuple(jobs), running=tuple(running)
    )


def _idle_mode(rng: random.Random, idle_mix: float) -> IdleResources:
    if rng.random() >= idle_mix:
        return IdleResources.OFF
    return IdleResources.ACCEPTABLE if rng.random() < 0.5 else IdleResources.ONLY


def _charge_busy_blocks(rng, nodes, quotas, idle_mix):
    """Turn every node's busy GPUs into a running job charged to a quota of its pool."""
    by_pool: dict[tuple, list[QuotaSnap]] = {}
    for q in quotas:
        by_pool.setdefault(q.pool, []).append(q)
    used = {q.id: [0, 0] for q in quotas}
    running = []
    for n in nodes:
        busy = n.gpus - len(n.free_gpu_indices)
        if not busy or n.pool not in by_pool:
            continue
        charged = rng.choice(by_pool[n.pool])
        borrowed = rng.random() < idle_mix
        owner = charged
        if borrowed:
            same_tenant = [q for q in by_pool[n.pool] if q.tenant_id == charged.tenant_id]
            owner = rng.choice(same_tenant)
        used[charged.id][0] += busy
        used[charged.id][1] += busy if borrowed else 0
        running.append(
            RunningSnap(
                id=10_000_000 + n.id,
                quota_id=owner.id,
                charged_quota_id=charged.id,
                in_quota=not borrowed,
                priority=rng.choice([0, 1, 2]),
                gpus_by_node=((n.id, busy),),
                started_at=NOW - timedelta(seconds=rng.randrange(1, 86_400)),
                last_checkpoint_at=NOW - timedelta(seconds=rng.randrange(1, 3_600)),
            )
        )
    quotas = [
        QuotaSnap(
            id=q.id, name=q.name, tenant_id=q.tenant_id, resource_type=q.resource_type,
            gpu_type=q.gpu_type, gpus=max(q.gpus, used[q.id][0]), used_gpus=used[q.id][0],
            borrowed_gpus=used[q.id][1],
            preemption="LowerPriority" if q.id % 4 == 0 else "Never",
        )
        for q in quotas
    ]  # fmt: skip
    return quotas, running


def with_tree(snap: Snapshot, seed: int = 1) -> Snapshot:
    """The snapshot's quotas as 3-level trees (docs/quota-tree.md), one per tenant and pool:
    the first quota of each group is the root, the next quarter its departments, the rest
    teams under the departments in turn. Each quota keeps its share as its own guarantee
    (so nothing charged now is above it); parents add their children's. Weights 1-3, a
    `max_gpus` on every second department, a `lending_limit` on every third."""
    rng = random.Random(seed)
    groups: dict[tuple, list[QuotaSnap]] = {}
    for q in snap.quotas:
        groups.setdefault((q.tenant_id, q.pool), []).append(q)
    parent: dict[int, int | None] = {}
    depts: set[int] = set()
    for members in groups.values():
        root, rest = members[0], members[1:]
        n_depts = max(1, len(rest) // 4) if rest else 0
        parent[root.id] = None
        for i, q in enumerate(rest):
            if i < n_depts:
                parent[q.id] = root.id
                depts.add(q.id)
            else:
                parent[q.id] = rest[i % n_depts].id
    subtree = {q.id: q.gpus for q in snap.quotas}
    for q in sorted(snap.quotas, key=lambda q: -_depth(q.id, parent)):  # leaves first
        if parent[q.id] is not None:
            subtree[parent[q.id]] += subtree[q.id]
    quotas = []
    for i, q in enumerate(snap.quotas):
        dept = q.id in depts
        quotas.append(
            replace(
                q,
                gpus=subtree[q.id],
                parent_id=parent[q.id],
                weight=float(rng.choice([1, 1, 2, 3])),
                max_gpus=int(subtree[q.id] * 1.5) if dept and i % 2 else None,
                lending_limit=subtree[q.id] // 2 if dept and i % 3 == 0 else None,
            )
        )
    return replace(snap, quotas=tuple(quotas))


def _depth(quota_id: int, parent: dict[int, int | None]) -> int:
    depth = 0
    while parent[quota_id] is not None:
        quota_id, depth = parent[quota_id], depth + 1
    return depth


def with_sharing_options(snap: Snapshot, seed: int = 1) -> Snapshot:
    """The sharing options on (docs/scheduling.md, the decision table): fair-share
    preemption for every tenant, a third of the quotas reclaiming from lower priorities
    only, a quarter preempting newer jobs of equal priority, a fifth letting idle jobs
    preempt borrowers up to priority 1 (where fair share is off: here, never; kept for the
    cost of reading it)."""
    rng = random.Random(seed)
    quotas = tuple(
        replace(
            q,
            fair_share_preemption=True,
            reclaim_within_tree=rng.choice(["Any", "Any", "LowerPriority"]),
            preemption=rng.choice(["Never", "LowerPriority", "LowerOrNewerEqualPriority", "Never"]),
            borrow_within_tree_max_priority=1 if rng.random() < 0.2 else None,
        )
        for q in snap.quotas
    )
    return replace(snap, quotas=quotas)
