"""Plain data the scheduler works on: a snapshot in, a plan out (docs/scheduling.md).

Everything here is frozen and free of Django, so `plan()` can be called by the Celery tick,
the simulator, the benchmarks and the table tests alike. A snapshot is taken once at the
start of a cycle; the plan is applied by `jobs.scheduler.cycle`.
"""

from dataclasses import dataclass
from datetime import datetime

from policy.statuses import IdleResources, JobStatus

# Nodes and quotas are matched on this pair: a quota's jobs only run on nodes of its
# resource type and GPU type (docs/scheduling.md: never across GPU types).
type PoolKey = tuple[str, str]  # (resource_type, gpu_type)


@dataclass(frozen=True, slots=True)
class NodeSnap:
    id: int
    name: str
    gpu_type: str
    resource_type: str
    free_gpu_indices: tuple[int, ...]
    gpus: int  # total GPUs on the node, free or not
    free_cpus: int
    free_memory_gb: int
    schedulable: bool = True  # Ready and not cordoned
    # Why it takes no new work ("cordoned", "NotReady", …); only for diagnosis.
    unschedulable_reason: str = ""

    @property
    def pool(self) -> PoolKey:
        return (self.resource_type, self.gpu_type)


@dataclass(frozen=True, slots=True)
class QuotaSnap:
    id: int
    name: str
    tenant_id: int
    resource_type: str
    gpu_type: str
    gpus: int
    used_gpus: int = 0
    # Guaranteed CPUs / memory; 0 means the quota does not limit them (quotas.models.Quota).
    cpus: int = 0
    memory_gb: int = 0
    used_cpus: int = 0
    used_memory_gb: int = 0
    # Of used_gpus: GPUs lent out, i.e. held by pods charged here but not in quota.
    borrowed_gpus: int = 0
    # Priority preemption inside the quota (Kueue's withinClusterQueue): "Never",
    # "LowerPriority" or "LowerOrNewerEqualPriority" (docs/scheduling.md, the decision table).
    preemption: str = "Never"
    # Whom a guaranteed job of this quota may reclaim lent capacity from (Kueue's
    # reclaimWithinCohort): "Any" borrower (today's rule), "LowerPriority" ones, or "Never".
    reclaim_within_tree: str = "Any"
    # Kueue's borrowWithinCohort: an idle job of this quota that finds no idle capacity may
    # preempt lower-priority borrowers of other quotas whose priority is at most this
    # threshold (None: off, today's rule).
    borrow_within_tree_max_priority: int | None = None
    # The quota tree (docs/quota-tree.md). `gpus` is the guarantee of the whole subtree;
    # its own guarantee is `gpus` less its children's `gpus`.
    parent_id: int | None = None
    max_gpus: int | None = None  # limit on what the subtree's jobs hold (None: no limit)
    lending_limit: int | None = None  # most of the subtree's guarantee lent out (None: all)
    weight: float = 1.0  # share of idle capacity when quotas compete
    fair_share_preemption: bool = False  # the tenant's setting, copied to each of its quotas
    # Historical fair share (docs/quota-tree.md): the quota's borrowed GPUs averaged over its
    # tenant's half-life (decayed GPU-seconds x ln 2 / half-life); 0 where the tenant is off.
    history_gpus: float = 0.0

    @property
    def pool(self) -> PoolKey:
        return (self.resource_type, self.gpu_type)

    @property
    def guaranteed_gpus(self) -> int:
        """GPUs held by this quota's own guaranteed (in-quota) pods."""
        return self.used_gpus - self.borrowed_gpus


@dataclass(frozen=True, slots=True)
class RunningSnap:
    """A placed job (Starting/Running) that holds GPUs: a possible preemption victim."""

    id: int
    quota_id: int  # the job's own quota
    charged_quota_id: int  # whose capacity its pods use
    in_quota: bool
    priority: int
    # (node id, GPUs held there) per worker; a node may appear once per worker.
    gpus_by_node: tuple[tuple[int, int], ...]
    started_at: datetime | None = None
    last_checkpoint_at: datetime | None = None  # newest committed checkpoint
    stopping: bool = False  # a stop or preemption is under way: its GPUs are being released
    name: str = ""
    # When it was preempted before (any attempt, newest last): the per-hour cap's input.
    preempted_at: tuple[datetime, ...] = ()
    # Per entry of gpus_by_node, the quota that worker is charged to, when a Lingjun idle
    # job pools several lenders (docs/scheduling.md); empty: every worker is charged_quota_id's.
    charges: tuple[int, ...] = ()
    # Its own setting: an `Acceptable` borrower moves its charge home when room appears.
    idle_resources: IdleResources = IdleResources.OFF
    # Per entry of gpus_by_node, whether that pod is in quota, when they differ (a job partly
    # in quota); empty: every pod is as `in_quota` says. Fair share counts borrowed pods only.
    pods_in_quota: tuple[bool, ...] = ()

    @property
    def borrowed_gpus(self) -> int:
        """GPUs of its pods that are not in quota: what fair share counts as borrowed."""
        if not self.pods_in_quota:
            return 0 if self.in_quota else self.gpus
        return sum(
            g for (_, g), inq in zip(self.gpus_by_node, self.pods_in_quota, strict=True) if not inq
        )

    @property
    def gpus(self) -> int:
        return sum(g for _, g in self.gpus_by_node)

    @property
    def lenders(self) -> tuple[int, ...]:
        """Every quota some of its workers are charged to (one, unless pooled)."""
        if not self.charges:
            return (self.charged_quota_id,)
        return tuple(sorted(set(self.charges)))

    def gpus_charged_to(self, quota_id: int) -> int:
        """GPUs of its workers charged to `quota_id`: what reclaiming it gives that quota."""
        if not self.charges:
            return self.gpus if quota_id == self.charged_quota_id else 0
        return sum(
            g for (_, g), q in zip(self.gpus_by_node, self.charges, strict=True) if q == quota_id
        )


@dataclass(frozen=True, slots=True)
class JobSnap:
    id: int
    quota_id: int
    workers: int
    gpus_per_worker: int
    cpus_per_worker: int
    memory_gb_per_worker: int
    priority: int
    submitted_at: datetime
    status: JobStatus = JobStatus.PENDING
    idle_resources: IdleResources = IdleResources.OFF
    # Workers of an earlier attempt that still hold resources (a restart in progress):
    # the new attempt waits for them, or the same rank would run twice.
    active_pods: int = 0
    name: str = ""
    # Since when it waits in this attempt (None: since submitted_at). Starvation rule input.
    waiting_since: datetime | None = None
    # Nodes this job must not be placed on (a `retry_elsewhere` failure there: ECC/Xid).
    excluded_node_ids: frozenset[int] = frozenset()
    # (lending quota id, when) of its recent reclaims: it does not borrow from that lender
    # again until the cool-down has passed (no borrow-reclaim-borrow loop).
    reclaimed_by: tuple[tuple[int, datetime], ...] = ()

    @property
    def label(self) -> str:
        return f"job {self.name}" if self.name else f"job #{self.id}"

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.workers, self.gpus_per_worker, self.cpus_per_worker, self.memory_gb_per_worker)


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeSnap, ...] = ()
    quotas: tuple[QuotaSnap, ...] = ()
    # Waiting jobs (Pending or Inqueue), in any order: plan() orders them.
    jobs: tuple[JobSnap, ...] = ()
    # Placed jobs holding GPUs (only needed for reclaim and priority preemption).
    running: tuple[RunningSnap, ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    rank: int
    node_id: int
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: int
    placements: tuple[Placement, ...]
    charged_quota_id: int
    in_quota: bool = True
    reason: str = ""  # "placed on node-0 (GPUs 0-3)": the JobEvent text
    # Per placement (same order), the lender its pod is charged to, when a Lingjun idle job
    # pools several lenders (docs/scheduling.md); empty: every pod is charged to charged_quota_id.
    charges: tuple[int, ...] = ()
    # Where the pods go alone, when `reason` also names the lenders (a borrowing admission):
    # "placed on node-0 (GPUs 0-3)". Empty: `reason` says only where.
    where: str = ""

    def charge_of(self, index: int) -> int:
        """The quota the pod of `placements[index]` is charged to."""
        return self.charges[index] if self.charges else self.charged_quota_id

    def charged_gpus(self) -> dict[int, int]:
        """GPUs charged per quota (one entry unless several lenders are pooled)."""
        if not self.charges:
            return {self.charged_quota_id: sum(len(p.gpu_indices) for p in self.placements)}
        out: dict[int, int] = {}
        for p, q in zip(self.placements, self.charges, strict=True):
            out[q] = out.get(q, 0) + len(p.gpu_indices)
        return out


# Not frozen: one is built for every waiting job on every cycle, and a frozen dataclass's
# __init__ (object.__setattr__ per field) cost 2.5 times a plain one, 10 % of the Celery
# worker's CPU in the Kueue baseline's full variant. Nothing changes one once built.
@dataclass(slots=True)
class QueueDecision:
    job_id: int
    reason: str
    position: int  # 1-based among the waiting jobs of the same quota, in admission order


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: int  # the victim
    for_job_id: int  # the waiting job it makes room for
    reason: str  # "reclaimed by team-b for job b2"
    reclaim: bool = False  # a lender takes back lent GPUs (else: priority in its quota)


@dataclass(frozen=True, slots=True)
class ChargeMove:
    """A running borrower's pods are re-charged, nothing restarts (docs/quota-tree.md).
    Home: an `Acceptable` job whose own quota now has room moves there, in quota, and is no
    reclaim victim any more. Away (`in_quota` False): a lender needs its GPUs back and
    another lender in the borrower's scope has room, so it is moved instead of preempted."""

    job_id: int
    quota_id: int  # the pods' new charge (its own quota when moving home)
    from_quota_ids: tuple[int, ...]  # the lenders its pods are charged to now
    pods: int  # its live pods: all of them move, or none (compare-and-set)
    reason: str  # "charge moved home to quota team-a (in quota)" / "charge moved to quota b"
    in_quota: bool = True  # the pods' new in-quota flag


ChargeHome = ChargeMove  # the move home, its first kind (kept for its callers)


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    queued: tuple[QueueDecision, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    # Charge moves, home and away (the name is the first kind's).
    charges_home: tuple[ChargeMove, ...] = ()

    def admission_for(self, job_id: int) -> Admission | None:
        return next((a for a in self.admissions if a.job_id == job_id), None)

    def decision_for(self, job_id: int) -> QueueDecision | None:
        return next((q for q in self.queued if q.job_id == job_id), None)
