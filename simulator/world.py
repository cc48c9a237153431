"""The simulated world: nodes, worker processes, jobs' work clocks; and the invariants.

Plain mutable objects owned by one `Simulation`. No policy lives here: only bookkeeping of
what the real code decided (see engine.py).
"""

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from policy.faulttolerance.policy import Counters
from policy.scheduler.model import JobSnap, NodeSnap
from policy.statuses import FINAL_POD_STATUSES, JobStatus, PodStatus
from protocol import words
from simulator.scenario import JobSpec, NodeSpec

EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
EPS = 1e-9


def at(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


@dataclass
class Violation:
    t: float
    text: str


class SimNode:
    def __init__(self, id: int, spec: NodeSpec) -> None:
        self.id, self.spec, self.name = id, spec, spec.name
        self.free: set[int] = set(range(spec.gpus))
        self.pods: list = []  # live pods on this node
        self.down = False
        self.cordoned = False  # takes no new work; its pods run on
        self.epoch = 0  # bumps on every node_down, so a stale "lost" timer is ignored
        self.double_booked: list[str] = []
        self._snap: NodeSnap | None = None  # rebuilt only after a change

    def snap(self) -> NodeSnap:
        if self._snap is None:
            self._snap = NodeSnap(
                id=self.id,
                name=self.name,
                gpu_type=self.spec.gpu_type,
                resource_type=self.spec.resource_type,
                free_gpu_indices=tuple(sorted(self.free)),
                gpus=self.spec.gpus,
                free_cpus=1 << 20,  # scenarios do not model CPUs and memory
                free_memory_gb=1 << 20,
                schedulable=not self.down and not self.cordoned,
                unschedulable_reason="NotReady"
                if self.down
                else ("cordoned" if self.cordoned else ""),
            )
        return self._snap

    def set_down(self, down: bool) -> None:
        self.down = down
        self._snap = None

    def set_cordoned(self, cordoned: bool) -> None:
        self.cordoned = cordoned
        self._snap = None

    def hold(self, pod) -> None:
        self._snap = None
        clash = set(pod.gpus) - self.free
        if clash:
            self.double_booked.append(f"{self.name}: GPUs {sorted(clash)} taken twice")
        self.free -= set(pod.gpus)
        self.pods.append(pod)

    def release(self, pod) -> None:
        self._snap = None
        if pod in self.pods:
            self.pods.remove(pod)
            self.free |= set(pod.gpus)


@dataclass(eq=False)
class SimPod:
    job: "SimJob"
    rank: int
    attempt: int
    node: SimNode
    gpus: tuple[int, ...]
    status: PodStatus = PodStatus.STARTING
    charged_to: int = 0
    in_quota: bool = True
    started_t: float = 0.0
    exit_code: int | None = None
    reason: str = ""
    stop_as: PodStatus | None = None
    stop_reason: str = ""
    counted: bool = False  # its GPUs are in the simulation's per-quota charge
    charged_since: float = 0.0  # since when `charged_to` holds (the summary's split)


@dataclass(eq=False)
class SimJob:
    id: int
    spec: JobSpec
    quota_id: int
    submitted_t: float
    status: JobStatus | None = None
    attempt: int = 1
    pods: list = field(default_factory=list)
    restarts: int = 0
    preemptions: int = 0
    node_losses: int = 0
    work_done: float = 0.0  # useful work so far (resumed checkpoint + this attempt)
    attempt_work: float = 0.0  # work done in the current attempt (failures count this)
    committed: float = 0.0  # work saved by the newest committed checkpoint
    checkpoint_t: float | None = None
    work_lost: float = 0.0
    advancing_since: float | None = None
    token: int = 0  # invalidates scheduled work moments when the clock changes
    admitted_t: float = 0.0
    wait_since: float = 0.0
    running_since: float = 0.0
    first_running_t: float | None = None
    finished_t: float | None = None
    busy_gpu_seconds: float = 0.0
    hung: bool = False
    hung_at: float = 0.0
    fired: set = field(default_factory=set)
    exit_failure: object = None
    lost_node: bool = False
    stop_final: JobStatus | None = None
    stop_reason: str = ""
    pending_restart: object = None
    pending_fail: str = ""
    not_before: float | None = None
    queue_reason: str = ""
    queue_position: int | None = None
    preempted_by: int | None = None
    preempted_times: list = field(default_factory=list)  # when it was preempted
    reclaimed_by: list = field(default_factory=list)  # (lender quota id, when)

    @property
    def name(self) -> str:
        return self.spec.name

    # -- work clock -----------------------------------------------------------------------
    def settle(self, t: float) -> None:
        """Bring work (and checkpoints) up to time t."""
        if self.advancing_since is None:
            if self.hung and not self.hung_at:
                self.hung_at = t
            return
        delta = t - self.advancing_since
        self.advancing_since = t
        if delta <= 0:
            return
        self.work_done = min(self.work_done + delta, self.spec.work)
        self.attempt_work += delta
        every = self.spec.checkpoint_every
        if every:
            saved = math.floor(self.work_done / every + EPS) * every
            if saved > self.committed:
                self.committed = saved
                self.checkpoint_t = t - (self.work_done - saved)
        if self.hung:
            self.hung_at = t

    def work_remaining(self) -> float:
        return self.spec.work - self.work_done

    def failures_due(self):
        return [
            f
            for f in self.spec.failures
            if f not in self.fired
            and (f.attempt is None or f.attempt == self.attempt)
            and f.after_work <= self.attempt_work + EPS
        ]

    def next_moment(self) -> float:
        step = self.work_remaining()
        for f in self.spec.failures:
            if f in self.fired or (f.attempt is not None and f.attempt != self.attempt):
                continue
            step = min(step, f.after_work - self.attempt_work)
        return max(step, 0.0)

    def lose_uncheckpointed(self) -> None:
        self.work_lost += self.work_done - self.committed
        self.work_done = self.committed

    def new_attempt(self, t: float) -> None:
        self.attempt += 1
        self.pods = []
        self.attempt_work = 0.0
        self.hung, self.hung_at = False, 0.0
        self.fired = set()
        self.exit_failure, self.lost_node = None, False
        self.pending_restart, self.pending_fail = None, ""
        self.stop_final, self.stop_reason = None, ""
        self.advancing_since = None
        self.wait_since = t
        self.finished_t = None
        self.queue_reason, self.queue_position = "", None
        self.token += 1

    def counters(self) -> Counters:
        return Counters(self.restarts, self.preemptions, self.node_losses)

    def snap(self, active_pods: int) -> JobSnap:
        return JobSnap(
            id=self.id,
            quota_id=self.quota_id,
            workers=self.spec.workers,
            gpus_per_worker=self.spec.gpus_per_worker,
            cpus_per_worker=0,
            memory_gb_per_worker=0,
            priority=self.spec.priority,
            submitted_at=at(self.submitted_t),
            status=self.status,
            idle_resources=self.spec.idle_resources,
            active_pods=active_pods,
            name=self.spec.name,
            waiting_since=at(self.wait_since) if self.attempt > 1 else None,
            reclaimed_by=tuple((q, at(t)) for q, t in self.reclaimed_by),
        )

    def summary(self) -> dict:
        return {
            "status": str(self.status),
            "attempts": self.attempt,
            "restarts": self.restarts,
            "preemptions": self.preemptions,
            "submitted_at": self.submitted_t,
            "first_running_at": self.first_running_t,
            "finished_at": self.finished_t,
            "work_done": round(self.work_done, 3),
            "work_lost": round(self.work_lost, 3),
        }


def check_invariants(sim, jobs) -> list[Violation]:
    """docs/simulator.md's invariants after a batch of events, for the jobs whose workers changed
    (and every quota, from the running per-quota charge). Cheap enough for whole traces."""
    out: list[Violation] = []
    for qid, q in sim.quotas.values():
        own = sim.own_gpus[qid]  # its own guarantee (docs/quota-tree.md); flat: its gpus
        if sim.charged[qid] > own:
            charged = f"{sim.charged[qid]}/{own} {words.gpu_noun(own)}"
            out.append(Violation(sim.t, f"quota {q.name}: {charged} charged"))
    if sim.has_tree:
        out.extend(tree_violations(sim))
    nodes = {p.node.id: p.node for job in jobs for p in job.pods}
    for node in nodes.values():
        for text in node.double_booked:
            out.append(Violation(sim.t, text))
        node.double_booked.clear()
        held = sum(len(p.gpus) for p in node.pods)
        if held > node.spec.gpus:
            size = f"{node.spec.gpus} {words.gpu_noun(node.spec.gpus)}"
            out.append(Violation(sim.t, f"{node.name}: {held}/{size} held"))
    for job in jobs:
        own = sim.quotas[job.spec.quota][1]
        live = [p for p in job.pods if p.status not in FINAL_POD_STATUSES]
        for pod in live:
            lender = sim.quotas[sim.quota_name[pod.charged_to]][1]
            if pod.in_quota:
                if pod.charged_to != job.quota_id:
                    out.append(Violation(sim.t, f"{job.name}: in quota of {lender.name}"))
                continue
            same_pool = (own.resource_type, own.gpu_type) == (lender.resource_type, lender.gpu_type)
            if own.tenant != lender.tenant or not same_pool:
                out.append(Violation(sim.t, f"{job.name}: borrows from {lender.name}"))
            if own.resource_type != "Lingjun" and own.name != lender.name:
                out.append(Violation(sim.t, f"{job.name}: GP borrows from {lender.name}"))
        for pod in job.pods:
            reclaimed = pod.status == PodStatus.PREEMPTED and pod.stop_reason.startswith(
                "reclaimed"
            )
            if reclaimed and pod.in_quota:
                out.append(Violation(sim.t, f"{job.name}: an in-quota worker was reclaimed"))
        if job.status == JobStatus.RUNNING and any(p.status == PodStatus.STARTING for p in live):
            out.append(Violation(sim.t, f"{job.name}: Running with a worker Starting"))
        if job.pods and (
            len(job.pods) != job.spec.workers or len({p.started_t for p in job.pods}) != 1
        ):
            out.append(Violation(sim.t, f"{job.name}: workers not started as one gang"))
    return out


def tree_violations(sim) -> list[Violation]:
    """The tree's invariants over every live pod: no subtree's jobs above its `max_gpus`,
    no subtree lending more than its `lending_limit` outside itself."""
    tree = sim.tree
    held: dict[int, int] = {}
    lent: dict[int, int] = {}
    for job in sim.active.values():
        for p in job.pods:
            if p.status in FINAL_POD_STATUSES:
                continue
            for a in tree.path(job.quota_id):
                held[a] = held.get(a, 0) + len(p.gpus)
            for a in tree.common_ancestor_below(p.charged_to, job.quota_id):
                lent[a] = lent.get(a, 0) + len(p.gpus)
    out = []
    for qid, q in tree.quotas.items():
        if q.max_gpus is not None and held.get(qid, 0) > q.max_gpus:
            text = f"{q.name}: {words.gpus(held[qid])} held, limit {q.max_gpus}"
            out.append(Violation(sim.t, text))
        if q.lending_limit is not None and lent.get(qid, 0) > q.lending_limit:
            text = f"{q.name}: {words.gpus(lent[qid])} lent, lending limit {q.lending_limit}"
            out.append(Violation(sim.t, text))
    return out
