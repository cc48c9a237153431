"""One scheduling cycle: the imperative shell around `plan()` (DESIGN §5).

    lock → load snapshot (8 queries) → plan() → apply, all in ONE transaction.

Serialisation: on PostgreSQL `pg_advisory_xact_lock(SCHEDULER_LOCK_KEY)` is the first
statement of the cycle's transaction and is released by its commit, so two cycles (two
Celery workers, beat plus an on-commit trigger) never plan on the same free GPUs: the second
one's snapshot is read after the first one's pods are committed. On SQLite a process-wide
lock keeps threads apart and the IMMEDIATE transaction mode (console.settings) takes the
database write lock at BEGIN, which keeps other processes apart.

Races with writers outside the lock (a user's stop, an agent's report) are settled row by
row. Status changes are the bulk form of `jobs.actions.transitions.transition`: the rows to move are
locked (`SELECT … FOR UPDATE`, ordered by id), only those still in the status the snapshot
saw are moved (UPDATE … WHERE status = <seen>) and get a JobEvent, in the same transaction.
A job that lost (stopped meanwhile) is skipped and its pods are not created; the user's
UPDATE that comes second matches no row and `request_stop` turns into a graceful stop.
Capacity is only ever freed outside the lock, so a slightly old snapshot is conservative.

Queries per cycle do not grow with the number of waiting jobs: 8 reads, one lock, one
UPDATE of statuses, one INSERT of events, one of pods, one UPDATE of queue reasons and
positions (plus one statement per further 500 rows changed). Preemptions (rare) cost a few
statements per victim: each goes through `jobs.actions.stop.request_stop(final_status=
PREEMPTED)` inside the cycle's transaction, so its workers get SIGTERM and the grace, and
the job ends Preempted once they have exited; the preemptor is placed in a later cycle,
after the victims' pods are final (their GPUs stay busy in every snapshot until then).
"""

import logging
import threading
from collections import Counter, defaultdict
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from cluster.models import GpuDevice, Node, NodeState
from jobs.actions.transitions import IllegalTransition, TransitionConflict
from jobs.hooks import Notice, announce_one
from jobs.models import Checkpoint, Job, Pod
from jobs.scheduler.bulk import insert_events, update_waiting
from jobs.scheduler.model import JobSnap, NodeSnap, Plan, QuotaSnap, RunningSnap, Snapshot
from jobs.scheduler.plan import PlanOptions, plan
from jobs.statuses import (
    ACTIVE_POD_STATUSES,
    PLACED_JOB_STATUSES,
    Actor,
    IdleResources,
    JobStatus,
    PodStatus,
    is_allowed,
)
from quotas.models import Quota

log = logging.getLogger(__name__)

# Any constant works as long as nothing else in the database uses it: "GPUSCHED" in ASCII.
SCHEDULER_LOCK_KEY = 0x4750555343484544
_process_lock = threading.RLock()
_LOCK_BATCH = 2000  # ids per SELECT … FOR UPDATE (SQLite limits query parameters)

_WAITING = (JobStatus.PENDING, JobStatus.INQUEUE)


@dataclass(frozen=True, slots=True)
class CycleResult:
    admitted: tuple[int, ...] = ()
    pods_created: int = 0
    newly_queued: tuple[int, ...] = ()  # Pending → Inqueue
    waiting: int = 0  # jobs left waiting after this cycle
    reasons_updated: int = 0  # Inqueue jobs whose reason or position changed
    conflicts: tuple[int, ...] = ()  # jobs another writer moved first
    preempted: tuple[int, ...] = ()  # victims whose graceful preemption was requested

    def as_dict(self) -> dict:
        return asdict(self)


class WaitingRow(NamedTuple):
    """What the shell needs of a waiting job beyond its JobSnap."""

    id: int
    status: str
    attempt: int
    status_reason: str
    queue_position: int | None
    gpus_per_worker: int
    cpus_per_worker: int
    memory_gb_per_worker: int


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
        result = apply_plan(decided, rows, now)
    if result.admitted or result.conflicts:
        log.info(
            "scheduler: admitted %d job(s), %d waiting, %d lost a race (first: %s)",
            len(result.admitted),
            result.waiting,
            len(result.conflicts),
            list(result.admitted[:5]),
        )
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
        held = holders.setdefault(job_id, [quota_id, in_quota, [], None])
        held[2].append((node_id, gpus))
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
    qfields = ("id", "name", "tenant_id", "resource_type", "gpu_type", "gpus", "cpus", "memory_gb")
    for (
        qid,
        name,
        tenant_id,
        resource_type,
        gpu_type,
        gpus,
        cpus,
        memory_gb,
        preemption,
    ) in Quota.objects.values_list(*qfields, "preemption").order_by("id"):
        used = quota_use.get(qid, [0, 0, 0, 0])
        quotas.append(
            QuotaSnap(
                id=qid,
                name=name,
                tenant_id=tenant_id,
                resource_type=resource_type,
                gpu_type=gpu_type,
                gpus=gpus,
                used_gpus=used[0],
                cpus=cpus,
                memory_gb=memory_gb,
                used_cpus=used[1],
                used_memory_gb=used[2],
                borrowed_gpus=used[3],
                preemption=preemption,
            )
        )

    preempted_at, reclaimed_by = _recent_preemptions()
    jobs, rows = [], {}
    # A fault-tolerance restart backing off after a crash (restart_not_before) waits.
    waiting = Job.objects.filter(
        Q(restart_not_before__isnull=True) | Q(restart_not_before__lte=timezone.now()),
        status__in=_WAITING,
        stop_requested_at__isnull=True,
    ).values_list(
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
        "updated_at",
        "excluded_nodes",
    )
    for row in waiting:
        jid, qid, workers, g, c, m, prio, created, status, idle, attempt, reason, pos = row[:13]
        name, updated, excluded = row[13:]
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
                status=JobStatus(status),
                idle_resources=IdleResources(idle),
                active_pods=job_pods.get(jid, 0),
                name=name,
                # A restart attempt waits from when it went back to Pending.
                waiting_since=updated if attempt > 1 and status == JobStatus.PENDING else None,
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
    fields = ("id", "quota_id", "priority", "started_at", "stop_requested_at", "name")
    for jid, qid, prio, job_started, stop_at, name in Job.objects.filter(
        status__in=placed
    ).values_list(*fields):
        held = holders.get(jid)
        if held is None:
            continue  # no live worker: holds nothing
        charged, in_quota, by_node, pod_started = held
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
            )
        )
    return tuple(running)


def apply_plan(decided: Plan, rows: dict[int, WaitingRow], now: datetime) -> CycleResult:
    """Write the plan. Must run inside the cycle's transaction (see `run_cycle`).

    Status changes (admissions → Starting, new waiters Pending → Inqueue) are the bulk form
    of `transitions.transition`: lock the rows (`SELECT … FOR UPDATE`; on SQLite the
    transaction already holds the write lock), keep only those still in the status the plan
    was made on, then one UPDATE per 500 rows plus one INSERT of JobEvents. A job that
    another writer moved first (a user's stop) is a conflict: skipped, no pods. Query count
    does not grow with the number of jobs (beyond one statement per 500 changed rows).
    """
    moves: dict[int, tuple[JobStatus, str, int | None]] = {}  # job → (to, reason, position)
    for admission in decided.admissions:
        moves[admission.job_id] = (JobStatus.STARTING, admission.reason, None)
    for decision in decided.queued:
        if rows[decision.job_id].status == JobStatus.PENDING:
            moves[decision.job_id] = (JobStatus.INQUEUE, decision.reason, decision.position)
    for job_id, (to_status, _, _) in moves.items():
        if not is_allowed(rows[job_id].status, to_status):
            raise IllegalTransition(rows[job_id].status, to_status)

    won = _lock_unchanged(rows, list(moves))
    conflicts = tuple(job_id for job_id in moves if job_id not in won)
    # (job id, from, to, reason, position) of every status change that goes ahead.
    changed = [
        (job_id, rows[job_id].status, to, why, pos)
        for job_id, (to, why, pos) in moves.items()
        if job_id in won
    ]
    if changed:
        if update_waiting(changed, now) != len(changed):
            # Impossible while the rows are locked; rolling back the cycle is the safe answer.
            raise RuntimeError("scheduler: locked job rows changed during the cycle")
        insert_events(
            [
                (job_id, rows[job_id].attempt, from_status, to_status, reason)
                for job_id, from_status, to_status, reason, _ in changed
            ],
            now,
        )

    admitted = tuple(a.job_id for a in decided.admissions if a.job_id in won)
    placed = [p for a in decided.admissions if a.job_id in won for p in a.placements]
    uuids = _gpu_uuids({p.node_id for p in placed if p.gpu_indices})
    pods = [
        Pod(
            job_id=admission.job_id,
            attempt=rows[admission.job_id].attempt,
            rank=p.rank,
            node_id=p.node_id,
            gpu_indices=list(p.gpu_indices),
            gpu_uuids=_uuids_of(uuids, p.node_id, p.gpu_indices),
            gpus=rows[admission.job_id].gpus_per_worker,
            cpus=rows[admission.job_id].cpus_per_worker,
            memory_gb=rows[admission.job_id].memory_gb_per_worker,
            charged_quota_id=admission.charged_quota_id,
            in_quota=admission.in_quota,
            status=PodStatus.STARTING,
        )
        for admission in decided.admissions
        if admission.job_id in won
        for p in admission.placements
    ]
    if pods:
        Pod.objects.bulk_create(pods)

    # Jobs already Inqueue: refresh reason and position only when they changed. Not a
    # status change, so no JobEvent (or every cycle would spam the timeline).
    refreshed = [
        (d.job_id, JobStatus.INQUEUE, JobStatus.INQUEUE, d.reason, d.position)
        for d in decided.queued
        if d.job_id not in moves
        and (rows[d.job_id].status_reason, rows[d.job_id].queue_position) != (d.reason, d.position)
    ]
    # Compare-and-set on status: a job stopped meanwhile is left alone.
    reasons_updated = update_waiting(refreshed, now) if refreshed else 0
    preempted = _preempt(decided)
    return CycleResult(
        admitted=admitted,
        preempted=preempted,
        pods_created=len(pods),
        newly_queued=tuple(c[0] for c in changed if c[2] == JobStatus.INQUEUE),
        waiting=len(decided.queued),
        reasons_updated=reasons_updated,
        conflicts=conflicts,
    )


def _gpu_uuids(node_ids: set[int]) -> dict[tuple[int, int], str]:
    """(node, index) → UUID of the placed nodes' GPUs (one query, only when placing)."""
    if not node_ids:
        return {}
    rows = GpuDevice.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "uuid")
    return {(node_id, index): uuid for node_id, index, uuid in rows}


def _uuids_of(uuids: dict[tuple[int, int], str], node_id: int, indices) -> list[str]:
    """The placed GPUs' UUIDs, or none if one is unknown (the agent then maps the indices
    itself, and refuses the launch if one cannot be read)."""
    found = [uuids.get((node_id, i), "") for i in indices]
    return found if all(found) else []


def _preempt(decided: Plan) -> tuple[int, ...]:
    """Ask each victim to stop gracefully as Preempted (a handful per cycle at most)."""
    if not decided.preemptions:
        return ()
    from jobs.actions.stop import JobNotActive, request_stop

    victims = Job.objects.in_bulk([p.job_id for p in decided.preemptions])
    done = []
    for p in decided.preemptions:
        job = victims.get(p.job_id)
        if job is None:
            continue
        try:
            request_stop(
                job, actor=Actor.SCHEDULER, final_status=JobStatus.PREEMPTED, reason=p.reason
            )
        except (JobNotActive, TransitionConflict):
            continue  # it ended meanwhile: its GPUs are being freed anyway
        if p.reclaim:
            announce_one(
                Notice.RECLAIMED, job, timezone.now(), reason=p.reason, actor=Actor.SCHEDULER
            )
        done.append(p.job_id)
    return tuple(done)


def _lock_unchanged(rows: dict[int, WaitingRow], job_ids: list[int]) -> set[int]:
    """Lock the jobs' rows; return those still in the status the snapshot saw."""
    won: set[int] = set()
    for i in range(0, len(job_ids), _LOCK_BATCH):
        chunk = job_ids[i : i + _LOCK_BATCH]
        # Ordered by id so two lockers of overlapping sets cannot deadlock.
        current = (
            Job.objects.select_for_update()
            .filter(pk__in=chunk)
            .order_by("pk")
            .values_list("id", "status")
        )
        won.update(job_id for job_id, status in current if status == rows[job_id].status)
    return won
