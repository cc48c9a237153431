"""Expected start of waiting jobs: a what-if run of the real `plan()` from the current state
(Slurm's `squeue --start`, but with the scheduler's own rules: quotas, idle borrowing,
reclaim, gang placement, starvation holds).

The core, `forecast()`, is pure: from the scheduler's snapshot and what each live job holds,
it plans, lets the earliest-ending running job end, frees what it held, plans again, and so on,
noting when each waiting job is admitted. A running job ends at its max runtime, or sooner
where its progress (steps per second towards its total) or similar past jobs (same quota and
name, finished Completed) say so; a job admitted in the what-if runs for its max runtime or
the past jobs' median. Every estimate names what it rests on, and a job that depends on a
running job whose end cannot be estimated gets no time at all, only that reason.

The shell, `jobs.forecast.expected_starts()`, loads the snapshot with the scheduler's own
loader plus two reads (what each live job holds; past durations), whatever the number of jobs.
"""

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from policy.forecast_steps import next_step
from policy.scheduler.model import JobSnap, NodeSnap, QuotaSnap, RunningSnap, Snapshot
from policy.scheduler.plan import PlanOptions, plan

MAX_EVENTS = 32  # steps (plans) simulated; the queue beyond that is "not estimated"
HORIZON = timedelta(days=30)
STOP_GRACE = timedelta(seconds=30)  # a preempted victim's workers get about this long


@dataclass(frozen=True, slots=True)
class Held:
    """What one live job holds, and when it is expected to give it back."""

    job_id: int
    label: str  # "job #12"
    charged_quota_id: int
    in_quota: bool
    # (node id, GPU indices, CPUs, memory GB) per live worker
    pods: tuple[tuple[int | None, tuple[int, ...], int, int], ...]
    ends_at: datetime | None
    basis: str  # how ends_at was estimated: "max runtime", "progress", "similar past jobs"
    # Per pod, its lender, when a pooled idle job has several; empty: all charged_quota_id.
    charges: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Estimate:
    job_id: int
    at: datetime | None  # None: cannot be estimated (see basis)
    basis: str  # what the estimate rests on, for the user

    @property
    def known(self) -> bool:
        return self.at is not None


@dataclass
class _World:
    """The cluster while the what-if runs (mutable; private to one forecast() call)."""

    nodes: dict[int, NodeSnap]
    quotas: dict[int, QuotaSnap]
    running: dict[int, RunningSnap]
    held: dict[int, Held]

    def release(self, held: Held) -> None:
        for node_id, indices, cpus, memory in held.pods:
            node = self.nodes.get(node_id) if node_id is not None else None
            if node is not None:
                free = tuple(sorted({*node.free_gpu_indices, *indices}))
                self.nodes[node_id] = replace(
                    node,
                    free_gpu_indices=free,
                    free_cpus=node.free_cpus + cpus,
                    free_memory_gb=node.free_memory_gb + memory,
                )
        charges = held.charges or (held.charged_quota_id,) * len(held.pods)
        for lender in dict.fromkeys(charges):
            quota = self.quotas.get(lender)
            if quota is None:
                continue
            pods = [p for p, q in zip(held.pods, charges, strict=True) if q == lender]
            gpus = sum(len(indices) for _, indices, _, _ in pods)
            self.quotas[quota.id] = replace(
                quota,
                used_gpus=max(quota.used_gpus - gpus, 0),
                used_cpus=max(quota.used_cpus - sum(p[2] for p in pods), 0),
                used_memory_gb=max(quota.used_memory_gb - sum(p[3] for p in pods), 0),
                borrowed_gpus=max(quota.borrowed_gpus - (0 if held.in_quota else gpus), 0),
            )
        self.running.pop(held.job_id, None)
        self.held.pop(held.job_id, None)

    def take(self, job: JobSnap, admission, started: datetime) -> list:
        pods = []
        for p in admission.placements:
            node = self.nodes[p.node_id]
            taken = set(p.gpu_indices)
            self.nodes[p.node_id] = replace(
                node,
                free_gpu_indices=tuple(i for i in node.free_gpu_indices if i not in taken),
                free_cpus=max(node.free_cpus - job.cpus_per_worker, 0),
                free_memory_gb=max(node.free_memory_gb - job.memory_gb_per_worker, 0),
            )
            pods.append(
                (p.node_id, tuple(p.gpu_indices), job.cpus_per_worker, job.memory_gb_per_worker)
            )
        workers: dict[int, int] = {}  # lender → workers charged to it
        for i in range(len(admission.placements)):
            lender = admission.charge_of(i)
            workers[lender] = workers.get(lender, 0) + 1
        for lender, n in workers.items():
            quota = self.quotas[lender]
            gpus = n * job.gpus_per_worker
            self.quotas[quota.id] = replace(
                quota,
                used_gpus=quota.used_gpus + gpus,
                used_cpus=quota.used_cpus + n * job.cpus_per_worker,
                used_memory_gb=quota.used_memory_gb + n * job.memory_gb_per_worker,
                borrowed_gpus=quota.borrowed_gpus + (0 if admission.in_quota else gpus),
            )
        self.running[job.id] = RunningSnap(
            id=job.id,
            quota_id=job.quota_id,
            charged_quota_id=admission.charged_quota_id,
            in_quota=admission.in_quota,
            charges=admission.charges,
            priority=job.priority,
            gpus_by_node=tuple((p.node_id, len(p.gpu_indices)) for p in admission.placements),
            started_at=started,
            name=job.name,
        )
        return pods

    def snapshot(self, waiting: dict[int, JobSnap]) -> Snapshot:
        return Snapshot(
            nodes=tuple(self.nodes.values()),
            quotas=tuple(self.quotas.values()),
            jobs=tuple(waiting.values()),
            running=tuple(self.running.values()),
        )


def _label(job: JobSnap) -> str:
    # By number only: estimates are shown to every member of a shared quota, and a job of
    # another workspace is not theirs to see by name.
    return f"job #{job.id}"


def _pools_of(snapshot: Snapshot, targets: set[int]) -> Snapshot:
    """Only the pools (resource type, GPU type) the target jobs run in: pools never share
    nodes or quotas, so the others cannot change when the targets start."""
    quota_pool = {q.id: q.pool for q in snapshot.quotas}
    pools = {quota_pool.get(j.quota_id) for j in snapshot.jobs if j.id in targets}
    quotas = {q.id for q in snapshot.quotas if q.pool in pools}
    return Snapshot(
        nodes=tuple(n for n in snapshot.nodes if n.pool in pools),
        quotas=tuple(q for q in snapshot.quotas if q.id in quotas),
        jobs=tuple(j for j in snapshot.jobs if j.quota_id in quotas),
        running=tuple(r for r in snapshot.running if r.charged_quota_id in quotas),
    )


def forecast(
    snapshot: Snapshot,
    held: list[Held],
    durations: dict[int, tuple[float, str]],
    now: datetime,
    options: PlanOptions | None = None,
    *,
    max_events: int = MAX_EVENTS,
    targets: set[int] | None = None,
) -> dict[int, Estimate]:
    """When each waiting job of `snapshot` would start if nothing new were submitted.

    `held`: every live job's resources and expected end (running jobs, and jobs whose workers
    are still stopping). `durations`: for waiting jobs, how long each would run once started
    (seconds, basis), where known. With `targets`, only their pools are simulated and the
    run stops once every target has a time.

    Cost: one plan() per step. Ends close together are taken as one step (within
    BUCKET_SHARE of how far ahead they are, at least BUCKET_MIN; policy.forecast_steps), and
    the later end of the step is the time given: a little late rather than early, and a
    forecast over a day takes a few dozen plans, not one per running job. A borrower that
    becomes reclaimable is a step too (plan() may reclaim it then).
    """
    if targets is not None:
        snapshot = _pools_of(snapshot, targets)
    world = _World(
        nodes={n.id: n for n in snapshot.nodes},
        quotas={q.id: q for q in snapshot.quotas},
        running={r.id: r for r in snapshot.running},
        held={h.job_id: h for h in held},
    )
    waiting = {j.id: j for j in snapshot.jobs}
    estimates: dict[int, Estimate] = {}
    t, why = now, "at the next scheduling cycle"
    for _ in range(max_events):
        decided = plan(world.snapshot(waiting), t, options)
        _admit(world, decided, waiting, estimates, durations, t, why)
        if not waiting or (targets is not None and targets <= estimates.keys()):
            break
        nxt = next_step(world.held, world.running, t, now, options or PlanOptions())
        if nxt is None:
            break
        t, why, step = nxt
        if t - now > HORIZON:
            break
        for h in step:
            world.release(h)
            job = waiting.get(h.job_id)
            if job is not None and job.active_pods:
                waiting[h.job_id] = replace(job, active_pods=0)
    reason = _not_estimated(world)
    for job_id in waiting:
        estimates[job_id] = Estimate(job_id, None, reason)
    return estimates


def _admit(
    world: "_World",
    decided,
    waiting: dict[int, JobSnap],
    estimates: dict[int, Estimate],
    durations: dict[int, tuple[float, str]],
    t: datetime,
    why: str,
) -> None:
    """One what-if plan's effects: admitted jobs start (and hold until their expected
    end), preempted victims end after the stop grace."""
    for admission in decided.admissions:
        job = waiting.pop(admission.job_id)
        estimates[job.id] = Estimate(job.id, t, why)
        pods = world.take(job, admission, t)
        seconds, basis = durations.get(job.id, (None, ""))
        world.held[job.id] = Held(
            job_id=job.id,
            label=_label(job),
            charged_quota_id=admission.charged_quota_id,
            in_quota=admission.in_quota,
            pods=tuple(pods),
            ends_at=t + timedelta(seconds=seconds) if seconds is not None else None,
            basis=basis,
            charges=admission.charges,
        )
    for victim in decided.preemptions:
        h = world.held.get(victim.job_id)
        if h is not None and (h.ends_at is None or h.ends_at > t + STOP_GRACE):
            basis = "preempted" if h.in_quota else "reclaimed"
            world.held[h.job_id] = replace(h, ends_at=t + STOP_GRACE, basis=basis)


def _not_estimated(world: "_World") -> str:
    unknown = [h.label for h in world.held.values() if h.ends_at is None]
    if unknown:
        return (
            f"not estimated: depends on {', '.join(sorted(unknown)[:3])}"
            f"{' and others' if len(unknown) > 3 else ''}, which has no max runtime, "
            "no progress towards a total and no similar past jobs"
        )
    return "not estimated: beyond what the forecast looks ahead"
