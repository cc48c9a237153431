"""One scheduling cycle: the imperative shell around `plan()` (DESIGN §5).

    lock → load snapshot (8 queries) → plan() → apply (`jobs.actions.scheduling`), all in
    ONE transaction.

Serialisation: on PostgreSQL `pg_advisory_xact_lock(SCHEDULER_LOCK_KEY)` is the first
statement of the cycle's transaction and is released by its commit, so two cycles (two
Celery workers, beat plus an on-commit trigger) never plan on the same free GPUs: the second
one's snapshot is read after the first one's pods are committed. On SQLite a process-wide
lock keeps threads apart and the IMMEDIATE transaction mode (console.settings) takes the
database write lock at BEGIN, which keeps other processes apart. Under both, a database
constraint refuses two live pods on one GPU (migration `pods_hold_distinct_gpus`).

Races with writers outside the lock (a user's stop, an agent's report) are settled row by
row in `jobs.actions.scheduling.apply_plan`: only jobs still in the status the snapshot saw
move. Capacity is only ever freed outside the lock, so a slightly old snapshot is
conservative.

Queries per cycle do not grow with the number of waiting jobs: 8 reads, one lock, then the
writes (see `apply_plan`). Preemptions (rare) cost a few statements per victim.
"""

import json
import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, DateTimeField, F, Max, Q, TextField, Value, When
from django.db.models.functions import Cast
from django.utils import timezone

from cluster.models import GpuDevice, Node, NodeState
from jobs.actions.scheduling import CycleResult, WaitingRow, apply_plan
from jobs.models import Checkpoint, Job, Pod
from jobs.scheduler.model import JobSnap, NodeSnap, Plan, QuotaSnap, RunningSnap, Snapshot
from jobs.scheduler.plan import PlanOptions, plan
from jobs.statuses import (
    ACTIVE_POD_STATUSES,
    PLACED_JOB_STATUSES,
    IdleResources,
    JobStatus,
    PodStatus,
)
from quotas.models import Quota

log = logging.getLogger(__name__)

# Any constant works as long as nothing else in the database uses it: "GPUSCHED" in ASCII.
SCHEDULER_LOCK_KEY = 0x4750555343484544
_process_lock = threading.RLock()

_WAITING = (JobStatus.PENDING, JobStatus.INQUEUE)
_JOB_STATUS = {s.value: s for s in JobStatus}
_IDLE = {i.value: i for i in IdleResources}
_NO_JSON_LIST = (None, "", "[]", "null")

# Tests only: called with the plan between plan() and its writes, inside the transaction and
# the lock, so a test can commit a change at that moment (tests/scheduler/test_concurrency).
after_plan: Callable[[Plan], None] | None = None


@contextmanager
def _serialised():
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULER_LOCK_KEY])
            yield
    else:
        local = _process_lock if connection.vendor == "sqlite" else nullcontext()
        with local, transaction.atomic():
            yield


def run_cycle(now: datetime | None = None) -> CycleResult:
    """Admit what fits, queue the rest with reasons. Safe to run anywhere, any number of
    times, concurrently: it is level-triggered and serialised."""
    now = now or timezone.now()
    with _serialised():
        snapshot, rows = load_snapshot()
        decided = plan(snapshot, now, plan_options())
        if after_plan is not None:
            after_plan(decided)
        result = apply_plan(decided, rows, now)
    if result.admitted or result.conflicts:
        log.info(
            "scheduler: admitted %d job(s), %d waiting, %d lost a race (first: %s)",
            len(result.admitted),
            result.waiting,
            len(result.conflicts),
            list(result.admitted[:5]),
        )
    if result.charged_home:
        log.info("scheduler: charge moved home (in quota) for job(s) %s", list(result.charged_home))
    return result


def plan_options() -> PlanOptions:
    """Scheduler knobs from settings (optional; defaults in PlanOptions)."""
    defaults = PlanOptions()
    return PlanOptions(
        min_runtime_before_reclaim_s=getattr(
            settings, "SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM", defaults.min_runtime_before_reclaim_s
        ),
        reserve_after_s=getattr(settings, "SCHEDULER_RESERVE_AFTER", defaults.reserve_after_s),
    )


def load_snapshot() -> tuple[Snapshot, dict[int, WaitingRow]]:
    """Read everything plan() needs in eight queries, whatever the number of jobs."""
    busy: dict[int, set[int]] = defaultdict(set)
    node_cpus: Counter[int] = Counter()
    node_memory: Counter[int] = Counter()
    quota_use: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    job_pods: Counter[int] = Counter()
    # Per job with live workers: charged quota, in quota, (node, GPUs) per worker, last start.
    holders: dict[int, list] = {}
    # A GPU is busy while any live worker holds it, whatever its job's status: a stopped
    # job's worker keeps its GPUs until it has exited.
    active = Pod.objects.filter(status__in=[s.value for s in ACTIVE_POD_STATUSES]).values_list(
        "job_id",
        "node_id",
        "gpu_indices",
        "gpus",
        "cpus",
        "memory_gb",
        "charged_quota_id",
        "in_quota",
        "started_at",
    )
    for job_id, node_id, indices, gpus, cpus, memory_gb, quota_id, in_quota, started in active:
        job_pods[job_id] += 1
        use = quota_use[quota_id]
        use[0] += gpus
        use[1] += cpus
        use[2] += memory_gb
        if not in_quota:
            use[3] += gpus
        held = holders.setdefault(job_id, [quota_id, in_quota, [], None, []])
        held[2].append((node_id, gpus))
        held[4].append(quota_id)  # per worker: a pooled idle job has several lenders
        if started and (held[3] is None or started > held[3]):
            held[3] = started
        if node_id is not None:
            busy[node_id].update(indices or ())
            node_cpus[node_id] += cpus
            node_memory[node_id] += memory_gb

    # Unhealthy GPUs, and GPUs in MIG mode (split into MIG devices, not whole GPUs).
    unhealthy: dict[int, set[int]] = defaultdict(set)
    unusable = GpuDevice.objects.filter(Q(healthy=False) | Q(mig_enabled=True))
    for node_id, index in unusable.values_list("node_id", "index"):
        unhealthy[node_id].add(index)

    nodes = []
    fields = ("id", "name", "gpu_type", "resource_type", "gpus", "cpus", "memory_gb")
    for row in Node.objects.values_list(*fields, "state", "cordoned").order_by("id"):
        node_id, name, gpu_type, resource_type, gpus, cpus, memory_gb, state, cordoned = row
        taken = busy.get(node_id, set()) | unhealthy.get(node_id, set())
        why = "cordoned" if cordoned else ("" if state == NodeState.READY else state)
        nodes.append(
            NodeSnap(
                id=node_id,
                name=name,
                gpu_type=gpu_type,
                resource_type=resource_type,
                free_gpu_indices=tuple(i for i in range(gpus) if i not in taken),
                gpus=gpus,
                free_cpus=max(cpus - node_cpus[node_id], 0),
                free_memory_gb=max(memory_gb - node_memory[node_id], 0),
                schedulable=not why,
                unschedulable_reason=why,
            )
        )

    quotas = []
    qfields = (
        "id",
        "name",
        "tenant_id",
        "resource_type",
        "gpu_type",
        "gpus",
        "cpus",
        "memory_gb",
        "preemption",
        "parent_id",
        "max_gpus",
        "lending_limit",
        "weight",
        "tenant__fair_share_preemption",
    )
    for row in Quota.objects.values(*qfields).order_by("id"):
        used = quota_use.get(row["id"], [0, 0, 0, 0])
        quotas.append(
            QuotaSnap(
                id=row["id"],
                name=row["name"],
                tenant_id=row["tenant_id"],
                resource_type=row["resource_type"],
                gpu_type=row["gpu_type"],
                gpus=row["gpus"],
                used_gpus=used[0],
                cpus=row["cpus"],
                memory_gb=row["memory_gb"],
                used_cpus=used[1],
                used_memory_gb=used[2],
                borrowed_gpus=used[3],
                preemption=row["preemption"],
                parent_id=row["parent_id"],
                max_gpus=row["max_gpus"],
                lending_limit=row["lending_limit"],
                weight=row["weight"],
                fair_share_preemption=row["tenant__fair_share_preemption"],
            )
        )

    preempted_at, reclaimed_by = _recent_preemptions()
    jobs, rows = [], {}
    # A fault-tolerance restart backing off after a crash (restart_not_before) waits.
    waiting = (
        Job.objects.filter(
            Q(restart_not_before__isnull=True) | Q(restart_not_before__lte=timezone.now()),
            status__in=_WAITING,
            stop_requested_at__isnull=True,
        )
        .annotate(
            # Decoded only where there is something to decode: ten thousand datetimes and JSON
            # lists are a measurable part of a cycle (bench/scheduler.py --db --profile).
            restart_waiting_since=Case(
                When(attempt__gt=1, status=JobStatus.PENDING, then=F("updated_at")),
                default=Value(None),
                output_field=DateTimeField(),
            ),
            excluded_text=Cast("excluded_nodes", TextField()),
        )
        .values_list(
            "id",
            "quota_id",
            "workers",
            "gpus_per_worker",
            "cpus_per_worker",
            "memory_gb_per_worker",
            "priority",
            "created_at",
            "status",
            "idle_resources",
            "attempt",
            "status_reason",
            "queue_position",
            "name",
            "restart_waiting_since",
            "excluded_text",
        )
    )
    for row in waiting:
        jid, qid, workers, g, c, m, prio, created, status, idle, attempt, reason, pos = row[:13]
        name, restart_waiting_since, excluded_text = row[13:]
        excluded = json.loads(excluded_text) if excluded_text not in _NO_JSON_LIST else None
        jobs.append(
            JobSnap(
                id=jid,
                quota_id=qid,
                workers=workers,
                gpus_per_worker=g,
                cpus_per_worker=c,
                memory_gb_per_worker=m,
                priority=prio,
                submitted_at=created,
                status=_JOB_STATUS[status],
                idle_resources=_IDLE[idle],
                active_pods=job_pods.get(jid, 0),
                name=name,
                # A restart attempt waits from when it went back to Pending.
                waiting_since=restart_waiting_since,
                excluded_node_ids=(
                    frozenset(e["id"] for e in excluded) if excluded else frozenset()
                ),
                reclaimed_by=reclaimed_by.get(jid, ()),
            )
        )
        rows[jid] = WaitingRow(jid, status, attempt, reason, pos, g, c, m)
    snapshot = Snapshot(
        nodes=tuple(nodes),
        quotas=tuple(quotas),
        jobs=tuple(jobs),
        running=_load_running(holders, preempted_at),
    )
    return snapshot, rows


def _recent_preemptions() -> tuple[dict[int, tuple], dict[int, tuple]]:
    """From the pods preempted in the last hour (one query): per job, when it was preempted
    (the per-hour cap) and which lenders reclaimed it (the re-borrow cool-down)."""
    since = timezone.now() - timedelta(hours=1)
    times: dict[int, dict[int, datetime]] = defaultdict(dict)  # job → attempt → when
    lenders: dict[int, dict[int, datetime]] = defaultdict(dict)  # job → lender → when
    rows = Pod.objects.filter(status=PodStatus.PREEMPTED, finished_at__gte=since).values_list(
        "job_id", "attempt", "charged_quota_id", "in_quota", "finished_at"
    )
    for job_id, attempt, charged, in_quota, finished in rows:
        times[job_id][attempt] = max(finished, times[job_id].get(attempt, finished))
        if not in_quota:
            lenders[job_id][charged] = max(finished, lenders[job_id].get(charged, finished))
    return (
        {j: tuple(sorted(t.values())) for j, t in times.items()},
        {j: tuple(sorted(q.items())) for j, q in lenders.items()},
    )


def _load_running(
    holders: dict[int, list], preempted_at: dict[int, tuple]
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
    for jid, qid, prio, job_started, stop_at, name, idle in Job.objects.filter(
        status__in=placed
    ).values_list(*fields):
        held = holders.get(jid)
        if held is None:
            continue  # no live worker: holds nothing
        charged, in_quota, by_node, pod_started, charges = held
        running.append(
            RunningSnap(
                id=jid,
                quota_id=qid,
                charged_quota_id=charged,
                in_quota=in_quota,
                priority=prio,
                gpus_by_node=tuple(by_node),
                started_at=pod_started or job_started,
                last_checkpoint_at=checkpoints.get(jid),
                stopping=stop_at is not None,
                name=name,
                preempted_at=preempted_at.get(jid, ()),
                # Only when pooled: one lender is the common case and the cheaper snapshot.
                charges=tuple(charges) if len(set(charges)) > 1 else (),
                idle_resources=_IDLE[idle],
            )
        )
    return tuple(running)
