"""The cycle's snapshot: everything `plan()` needs, read in eight queries whatever the number
of jobs (docs/scheduling.md). Reads only; `jobs.forecast` and the usage pages read the same
snapshot outside the cycle.

Rows are read as named rows (`values_list(named=True)`) and summed into small named
accumulators; nothing is unpacked by position.
"""

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db.models import (
    F,
    Max,
    OuterRef,
    Q,
    Subquery,
)
from django.utils import timezone

from cluster.models import GpuDevice, Node, NodeState
from jobs.models import Checkpoint, Job, Pod
from jobs.scheduler.rows import WaitingRow
from jobs.scheduler.waiting import read_waiting
from policy.scheduler.model import JobSnap, NodeSnap, QuotaSnap, RunningSnap, Snapshot
from policy.statuses import (
    ACTIVE_POD_STATUSES,
    PLACED_JOB_STATUSES,
    IdleResources,
    PodStatus,
)
from policy.usage_history import average_gpus, decayed_on
from quotas.models import Quota, QuotaDecayedUsage

_IDLE = {i.value: i for i in IdleResources}

# The quota columns copied into QuotaSnap as they are (same names): add a column here and a
# field to QuotaSnap, and the snapshot carries it.
QUOTA_COLUMNS = (
    "id",
    "name",
    "tenant_id",
    "resource_type",
    "gpu_type",
    "gpus",
    "cpus",
    "memory_gb",
    "preemption",
    "reclaim_within_tree",  # the sharing options (docs/scheduling.md, the decision table)
    "borrow_within_tree_max_priority",
    # The quota tree (docs/quota-tree.md) and the tenant's fair-share switch.
    "parent_id",
    "max_gpus",
    "lending_limit",
    "weight",
    "fair_share_preemption",
)


@dataclass(slots=True)
class QuotaUse:
    """What the live workers charged to a quota hold."""

    gpus: int = 0
    cpus: int = 0
    memory_gb: int = 0
    borrowed_gpus: int = 0  # of `gpus`: held by pods not in quota (lent out)


@dataclass(slots=True)
class Holding:
    """A job's live workers: where they run and whose capacity they use."""

    charged_quota_id: int
    in_quota: bool
    gpus_by_node: list[tuple[int | None, int]] = field(default_factory=list)
    last_started_at: datetime | None = None
    charges: list[int] = field(default_factory=list)  # per worker: pooled jobs have several
    pods_in_quota: list[bool] = field(default_factory=list)  # per worker (fair share by pod)


@dataclass(slots=True)
class NodeUse:
    busy_gpus: set[int] = field(default_factory=set)
    cpus: int = 0
    memory_gb: int = 0


@dataclass
class LiveUse:
    """The live workers summed per quota, per job and per node (one query)."""

    quotas: dict[int, QuotaUse] = field(default_factory=lambda: defaultdict(QuotaUse))
    holdings: dict[int, Holding] = field(default_factory=dict)
    pods_per_job: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    nodes: dict[int, NodeUse] = field(default_factory=lambda: defaultdict(NodeUse))


def load_snapshot(
    now: datetime | None = None, *, incremental: bool = False
) -> tuple[Snapshot, dict[int, WaitingRow]]:
    """Read everything plan() needs in eight queries, whatever the number of jobs. `now`
    is the cycle's (restart back-offs and recent preemptions are judged at it).
    `incremental` (the cycle): waiting rows this process decoded at the same row version
    are not read again (`jobs.scheduler.waiting`; one more query for the others on
    PostgreSQL). Pages and the forecast read them whole, as before."""
    now = now or timezone.now()
    use = _live_use()
    preempted_at, reclaimed_by = _recent_preemptions(now)
    jobs, rows = _load_waiting(now, use, reclaimed_by, incremental)
    snapshot = Snapshot(
        nodes=_load_nodes(use),
        quotas=_load_quotas(use, now),
        jobs=jobs,
        running=_load_running(use.holdings, preempted_at),
    )
    return snapshot, rows


def _live_use() -> LiveUse:
    """A GPU is busy while any live worker holds it, whatever its job's status: a stopped
    job's worker keeps its GPUs until it has exited."""
    use = LiveUse()
    active = Pod.objects.filter(status__in=[s.value for s in ACTIVE_POD_STATUSES])
    pods = active.values_list(
        "job_id",
        "node_id",
        "gpu_indices",
        "gpus",
        "cpus",
        "memory_gb",
        "charged_quota_id",
        "in_quota",
        "started_at",
        named=True,
    )
    for pod in pods:
        use.pods_per_job[pod.job_id] += 1
        charged = use.quotas[pod.charged_quota_id]
        charged.gpus += pod.gpus
        charged.cpus += pod.cpus
        charged.memory_gb += pod.memory_gb
        if not pod.in_quota:
            charged.borrowed_gpus += pod.gpus
        held = use.holdings.get(pod.job_id)
        if held is None:
            held = use.holdings[pod.job_id] = Holding(pod.charged_quota_id, pod.in_quota)
        held.gpus_by_node.append((pod.node_id, pod.gpus))
        held.charges.append(pod.charged_quota_id)
        held.pods_in_quota.append(pod.in_quota)
        if pod.started_at and (
            held.last_started_at is None or pod.started_at > held.last_started_at
        ):
            held.last_started_at = pod.started_at
        if pod.node_id is not None:
            node = use.nodes[pod.node_id]
            node.busy_gpus.update(pod.gpu_indices or ())
            node.cpus += pod.cpus
            node.memory_gb += pod.memory_gb
    return use


def _load_nodes(use: LiveUse) -> tuple[NodeSnap, ...]:
    # Unhealthy GPUs, and GPUs in MIG mode (split into MIG devices, not whole GPUs).
    unusable: dict[int, set[int]] = defaultdict(set)
    devices = GpuDevice.objects.filter(Q(healthy=False) | Q(mig_enabled=True))
    for device in devices.values_list("node_id", "index", named=True):
        unusable[device.node_id].add(device.index)
    nodes = []
    fields = ("id", "name", "gpu_type", "resource_type", "gpus", "cpus", "memory_gb")
    for row in Node.objects.values_list(*fields, "state", "cordoned", named=True).order_by("id"):
        held = use.nodes.get(row.id) or NodeUse()
        taken = held.busy_gpus | unusable.get(row.id, set())
        why = "cordoned" if row.cordoned else ("" if row.state == NodeState.READY else row.state)
        nodes.append(
            NodeSnap(
                id=row.id,
                name=row.name,
                gpu_type=row.gpu_type,
                resource_type=row.resource_type,
                free_gpu_indices=tuple(i for i in range(row.gpus) if i not in taken),
                gpus=row.gpus,
                free_cpus=max(row.cpus - held.cpus, 0),
                free_memory_gb=max(row.memory_gb - held.memory_gb, 0),
                schedulable=not why,
                unschedulable_reason=why,
            )
        )
    return tuple(nodes)


def _load_quotas(use: LiveUse, now: datetime) -> tuple[QuotaSnap, ...]:
    quotas = []
    decayed = QuotaDecayedUsage.objects.filter(quota_id=OuterRef("pk"))
    rows = Quota.objects.annotate(
        fair_share_preemption=F("tenant__fair_share_preemption"),
        history_on=F("tenant__historical_fair_share"),
        half_life_h=F("tenant__fair_share_half_life_hours"),
        decayed_s=Subquery(decayed.values("gpu_seconds")[:1]),
        decayed_at=Subquery(decayed.values("at")[:1]),
    )
    extra = ("history_on", "half_life_h", "decayed_s", "decayed_at")
    for row in rows.values_list(*QUOTA_COLUMNS, *extra, named=True).order_by("id"):
        used = use.quotas.get(row.id) or QuotaUse()
        columns = row._asdict()
        history = _history_gpus(*(columns.pop(name) for name in extra), now)
        quotas.append(
            QuotaSnap(
                **columns,
                history_gpus=history,
                used_gpus=used.gpus,
                used_cpus=used.cpus,
                used_memory_gb=used.memory_gb,
                borrowed_gpus=used.borrowed_gpus,
            )
        )
    return tuple(quotas)


def _history_gpus(on: bool, half_life_h, seconds, at, now: datetime) -> float:
    """Historical fair share's input: the quota's decayed borrowed GPU-seconds (written by
    the usage roll-up), decayed on to now, as average GPUs; 0 where the tenant is off."""
    if not on or not seconds or at is None:
        return 0.0
    half_life = (half_life_h or 1) * 3600
    return average_gpus(decayed_on(seconds, at, now, half_life), half_life)


def _load_waiting(
    now: datetime, use: LiveUse, reclaimed_by: dict[int, tuple], incremental: bool
) -> tuple[tuple[JobSnap, ...], dict[int, WaitingRow]]:
    """The waiting jobs (`jobs.scheduler.waiting`: incremental on PostgreSQL), with what
    other tables say of them: live pods of an earlier attempt, recent reclaims."""
    jobs, rows = [], {}
    for waiting in read_waiting(now, incremental=incremental):
        job, row = waiting.job, waiting.row
        pods, lenders = use.pods_per_job.get(row.id, 0), reclaimed_by.get(row.id, ())
        if pods or lenders:
            job = replace(job, active_pods=pods, reclaimed_by=lenders)
        jobs.append(job)
        rows[row.id] = row
    return tuple(jobs), rows


def _recent_preemptions(now: datetime) -> tuple[dict[int, tuple], dict[int, tuple]]:
    """From the pods preempted in the last hour (one query): per job, when it was preempted
    (the per-hour cap) and which lenders reclaimed it (the re-borrow cool-down)."""
    since = now - timedelta(hours=1)
    times: dict[int, dict[int, datetime]] = defaultdict(dict)  # job → attempt → when
    lenders: dict[int, dict[int, datetime]] = defaultdict(dict)  # job → lender → when
    preempted = Pod.objects.filter(status=PodStatus.PREEMPTED, finished_at__gte=since)
    fields = ("job_id", "attempt", "charged_quota_id", "in_quota", "finished_at")
    for pod in preempted.values_list(*fields, named=True):
        job, finished = pod.job_id, pod.finished_at
        times[job][pod.attempt] = max(finished, times[job].get(pod.attempt, finished))
        if not pod.in_quota:
            charged = pod.charged_quota_id
            lenders[job][charged] = max(finished, lenders[job].get(charged, finished))
    return (
        {j: tuple(sorted(t.values())) for j, t in times.items()},
        {j: tuple(sorted(q.items())) for j, q in lenders.items()},
    )


def _load_running(
    holders: dict[int, Holding], preempted_at: dict[int, tuple]
) -> tuple[RunningSnap, ...]:
    """Placed jobs holding GPUs, with their newest committed checkpoint (2 queries)."""
    placed = [s.value for s in PLACED_JOB_STATUSES]
    checkpoints = dict(
        Checkpoint.objects.filter(committed=True, job__status__in=placed)
        .values("job_id")
        .annotate(last=Max("created_at"))
        .values_list("job_id", "last")
    )
    running = []
    fields = (
        "id",
        "quota_id",
        "priority",
        "started_at",
        "stop_requested_at",
        "name",
        "idle_resources",
    )
    for job in Job.objects.filter(status__in=placed).values_list(*fields, named=True):
        held = holders.get(job.id)
        if held is None:
            continue  # no live worker: holds nothing
        running.append(
            RunningSnap(
                id=job.id,
                quota_id=job.quota_id,
                charged_quota_id=held.charged_quota_id,
                in_quota=all(held.pods_in_quota),  # a partly-borrowing job is a borrower
                priority=job.priority,
                gpus_by_node=tuple(held.gpus_by_node),
                started_at=held.last_started_at or job.started_at,
                last_checkpoint_at=checkpoints.get(job.id),
                stopping=job.stop_requested_at is not None,
                name=job.name,
                preempted_at=preempted_at.get(job.id, ()),
                # Only when pooled: one lender is the common case and the cheaper snapshot.
                charges=tuple(held.charges) if len(set(held.charges)) > 1 else (),
                idle_resources=_IDLE[job.idle_resources],
                # Only when mixed: fair share counts a job's borrowed pods, not the job.
                pods_in_quota=tuple(held.pods_in_quota) if len(set(held.pods_in_quota)) > 1 else (),
            )
        )
    return tuple(running)
