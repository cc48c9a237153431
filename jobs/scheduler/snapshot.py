"""The cycle's snapshot: everything `plan()` needs, read in eight queries whatever the number
of jobs (docs/scheduling.md). Reads only; `jobs.forecast` and the usage pages read the same
snapshot outside the cycle. The cycle's own reads (`incremental`) keep the live pods, the
placed and the waiting jobs between cycles on PostgreSQL and read again only what changed
(`jobs.scheduler.live`, `.running`, `.waiting`).

Rows are read as named rows (`values_list(named=True)`) and summed into small named
accumulators; nothing is unpacked by position.
"""

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta

from django.db.models import (
    F,
    OuterRef,
    Q,
    Subquery,
)
from django.utils import timezone

from cluster.models import GpuDevice, Node, NodeState
from jobs.models import Pod
from jobs.scheduler import live, running, waiting
from jobs.scheduler.live import LiveUse, NodeUse, QuotaUse, read_live_use
from jobs.scheduler.rows import WaitingRow
from jobs.scheduler.running import read_running
from jobs.scheduler.waiting import read_waiting
from policy.scheduler.model import JobSnap, NodeSnap, QuotaSnap, Snapshot
from policy.statuses import PodStatus
from policy.usage_history import average_gpus, decayed_on
from quotas.models import Quota, QuotaDecayedUsage

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


def forget() -> None:
    """Drop what this process keeps between the cycle's snapshots: the next one reads
    every row (the live pods, the placed and the waiting jobs)."""
    live.forget()
    running.forget()
    waiting.forget()


def load_snapshot(
    now: datetime | None = None, *, incremental: bool = False
) -> tuple[Snapshot, dict[int, WaitingRow]]:
    """Read everything plan() needs in eight queries, whatever the number of jobs. `now`
    is the cycle's (restart back-offs and recent preemptions are judged at it).
    `incremental` (the cycle): on PostgreSQL, rows this process read before and nobody
    changed since are not read again (live pods, placed and waiting jobs: their ids and
    versions, then one more query where some are new or changed). Pages and the forecast
    read them whole."""
    now = now or timezone.now()
    use = read_live_use(incremental=incremental)
    preempted_at, reclaimed_by = _recent_preemptions(now)
    jobs, rows = _load_waiting(now, use, reclaimed_by, incremental)
    snapshot = Snapshot(
        nodes=_load_nodes(use),
        quotas=_load_quotas(use, now),
        jobs=jobs,
        running=read_running(use.holdings, preempted_at, incremental=incremental),
    )
    return snapshot, rows


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
    for one in read_waiting(now, incremental=incremental):
        job, row = one.job, one.row
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
