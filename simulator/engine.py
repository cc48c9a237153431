"""The simulator: a discrete-event loop with a simulated clock around the real pure code.

It never reimplements policy (docs/simulator.md): scheduling is `policy.scheduler.plan.plan`,
job status follows its workers through `policy.derive.derive_job_transitions`, every job
transition is checked with `policy.statuses.is_allowed`, restarts are decided by
`policy.faulttolerance.policy.decide` and hangs judged by `policy.faulttolerance.hang`.
What is simulated is only the world: nodes, worker processes, time.

World model (the choices docs/simulator.md leaves open):
- a cycle runs after every batch of events at the same instant, and again at once while it
  preempted someone (workers exit at SIGTERM unless hung; a hung worker is killed when the
  grace runs out), so a preemptor starts only after its victims' pods are final;
- workers start `start_delay` after admission; work advances only while every worker of
  the attempt is Running and none is hung; checkpoints commit every `checkpoint_every` of
  work and a new attempt resumes from the newest one;
- a silent node's workers are Unknown (no work); after `node_lost_timeout` they are Lost;
  a cordoned node keeps its workers and takes no new ones;
- a waiting job's reason and queue position (plan()'s `QueueDecision`, the console's
  `status_reason`/`queue_position`) are written when they change, once per instant.
"""

import heapq
import itertools

from policy.faulttolerance import hang
from policy.faulttolerance.policy import Failure, FailureKind
from policy.scheduler.fit import QuotaSize, never_fits
from policy.scheduler.plan import PlanOptions
from policy.scheduler.tree import QuotaTree
from policy.statuses import (
    FINAL_JOB_STATUSES,
    FINAL_POD_STATUSES,
    JobStatus,
    PodStatus,
    is_allowed,
)
from simulator.faults import Lifecycle
from simulator.scenario import JobSpec, Scenario
from simulator.sim_cycle import Scheduling
from simulator.views import summary_of
from simulator.world import SimJob, SimNode, SimPod, Violation, at, check_invariants

S, P = JobStatus, PodStatus


class Simulation(Lifecycle, Scheduling):
    def __init__(
        self,
        scenario: Scenario,
        until: float | None = None,
        emit=None,
        audit: bool = False,
        observe=None,
        keep_events: bool = True,
    ) -> None:
        self.sc = scenario
        self.audit = audit  # check every active job after every cycle (property tests)
        self.observe = observe  # callable(sim) after each instant's cycles (property tests)
        self.cfg = scenario.settings
        self.until = until
        self.emit_line = emit  # callable(dict) or None
        # Events are also kept in self.events unless keep_events is False (a 10,000-job trace
        # writes over a million: its waiting jobs' queue positions move up as others start).
        self.keep_events = keep_events
        self.events: list[dict] = []
        self.t = 0.0
        self.last_t = 0.0  # time of the last event written: where an unbounded run ends
        self._queue: list = []
        self._seq = itertools.count()
        self.nodes = {n.name: SimNode(i + 1, n) for i, n in enumerate(scenario.nodes)}
        self.node_by_id = {n.id: n for n in self.nodes.values()}
        self.quotas = {q.name: (i + 1, q) for i, q in enumerate(scenario.quotas)}
        self.quota_name = {qid: q.name for qid, q in self.quotas.values()}
        self.preemptible = {qid: q.preemption != "Never" for qid, q in self.quotas.values()}
        self.dirty: dict[int, SimJob] = {}  # jobs whose pods changed since the last check
        self.charged = dict.fromkeys(self.quota_name, 0)  # GPUs held by live pods, per quota
        self.tenant_ids = {t: i + 1 for i, t in enumerate(scenario.tenants)}
        self.jobs: dict[str, SimJob] = {}
        self.active: dict[int, SimJob] = {}  # jobs not final (or final with live workers)
        self.job_by_id: dict[int, SimJob] = {}
        self.violations: list[Violation] = []
        self.preemption_count = 0
        self.refused: dict[str, str] = {}  # job name → why it was refused at submission
        self._waits: dict[int, tuple[str, int]] = {}  # this instant's reasons and positions
        pooled: dict[tuple, tuple[int, ...]] = {}  # each quota's GPUs, per tenant and pool
        for q in scenario.quotas:
            key = (q.tenant, q.resource_type, q.gpu_type)
            pooled[key] = (*pooled.get(key, ()), q.gpus)
        self.pool_gpus: dict[tuple[str, str], tuple[int, ...]] = {}  # each node's GPUs
        for n in scenario.nodes:
            key = (n.resource_type, n.gpu_type)
            self.pool_gpus[key] = (*self.pool_gpus.get(key, ()), n.gpus)
        self.sizes = {
            qid: QuotaSize(
                q.name,
                q.resource_type,
                q.gpu_type,
                q.gpus,
                tenant_gpus=sum(pooled[(q.tenant, q.resource_type, q.gpu_type)]),
                tenant_quota_gpus=pooled[(q.tenant, q.resource_type, q.gpu_type)],
                id=qid,
            )
            for qid, q in self.quotas.values()
        }
        self.charge_seconds: dict[tuple[int, int], float] = {}  # (job's quota, charged) → s
        # The quota tree (docs/quota-tree.md): each quota's own guarantee, and the tenant's
        # quotas of its pool as never_fits' `tree`. None of it when every quota is flat.
        quota_snaps = self.snapshot().quotas
        self.tree = QuotaTree.of(quota_snaps)
        self.has_tree = any(
            q.parent or q.max_gpus is not None or q.lending_limit is not None
            for q in scenario.quotas
        )
        self.own_gpus = {qid: self.tree.own_gpus(qid) for qid in self.quota_name}
        self.tree_of = {
            q.id: tuple(o for o in quota_snaps if (o.tenant_id, o.pool) == (q.tenant_id, q.pool))
            for q in quota_snaps
        }
        self.options = PlanOptions(
            min_runtime_before_reclaim_s=self.cfg.min_runtime_before_reclaim,
            reserve_after_s=self.cfg.reserve_after,
        )
        for spec in scenario.jobs:
            self._push(spec.submit_at, "submit", spec)
        for action in scenario.actions:
            self._push(action.at, "action", action)

    # -- plumbing -----------------------------------------------------------------------------
    def _push(self, t: float, kind: str, *payload) -> None:
        heapq.heappush(self._queue, (t, next(self._seq), kind, payload))

    def _out(self, event: dict) -> None:
        event = {"t": round(self.t, 3), **event}
        self.last_t = self.t
        if self.keep_events:
            self.events.append(event)
        if self.emit_line:
            self.emit_line(event)

    def _job_event(
        self, job: SimJob, to: JobStatus, reason: str, position: int | None = None
    ) -> None:
        if job.status is not None and not is_allowed(job.status, to):
            self.violations.append(Violation(self.t, f"{job.name}: {job.status} → {to} refused"))
            return
        event = {"job": job.name, "to": str(to)}
        if job.status is not None:
            event = {"job": job.name, "from": str(job.status), "to": str(to), "reason": reason}
        if position is not None:
            event["position"] = position
        job.status = to
        self._out(event)

    def _queued(self, decided_queued) -> None:
        """What plan() says of the waiting jobs (`QueueDecision`s), as the console shows it.
        Pending → Inqueue is a transition carrying reason and position at once; a later
        decision that differs from the last one written is kept for `_flush_waiting` (and
        forgotten if the next cycle of the same instant says what was written)."""
        waits, jobs = self._waits, self.job_by_id
        for q in decided_queued:
            job = jobs[q.job_id]
            if job.status == S.PENDING:
                job.queue_reason, job.queue_position = q.reason, q.position
                self._job_event(job, S.INQUEUE, q.reason, q.position)
                # The starvation hold starts then: the production loop would act on it.
                since = job.wait_since if job.attempt > 1 else job.submitted_t
                self._push(max(self.t, since + self.options.reserve_after_s), "wake")
            elif q.reason != job.queue_reason or q.position != job.queue_position:
                waits[q.job_id] = (q.reason, q.position)
            elif waits:
                waits.pop(q.job_id, None)

    def _flush_waiting(self) -> None:
        """An event for each job still Inqueue whose reason or queue position differs from
        the last one written: only changes, never one per cycle per job, and not the
        flicker between the cycles of one instant (a preemptor ahead of it admitted a moment
        later). Not a transition, so it has `status`, not `from`/`to`."""
        for job_id, (reason, position) in self._waits.items():
            job = self.job_by_id[job_id]
            if job.status != S.INQUEUE or (reason, position) == (
                job.queue_reason,
                job.queue_position,
            ):
                continue
            job.queue_reason, job.queue_position = reason, position
            event = {"job": job.name, "status": str(S.INQUEUE), "reason": reason}
            self._out({**event, "position": position})
        self._waits = {}

    def _pod_event(self, pod: SimPod, status: PodStatus, reason: str = "") -> None:
        pod.status = status
        self.dirty[pod.job.id] = pod.job
        if status == P.STARTING and not pod.counted:
            pod.counted = True
            self.charged[pod.charged_to] += len(pod.gpus)
        event = {
            "job": pod.job.name,
            "pod": pod.rank,
            "attempt": pod.attempt,
            "node": pod.node.name,
            "gpus": len(pod.gpus),
            "charged_to": self.quota_name[pod.charged_to],
            "in_quota": pod.in_quota,
            "pod_status": str(status),
        }
        if reason:
            event["reason"] = reason
        if status in FINAL_POD_STATUSES:
            self._settle_charge(pod)
            self.charged[pod.charged_to] -= len(pod.gpus)
            pod.node.release(pod)
            pod.job.busy_gpu_seconds += len(pod.gpus) * (self.t - pod.started_t)
        self._out(event)

    # -- main loop ----------------------------------------------------------------------------
    def run(self) -> dict:
        while self._queue:
            t = self._queue[0][0]
            if self.until is not None and t > self.until:
                break
            self.t = t
            while self._queue and self._queue[0][0] == t:
                _, _, kind, payload = heapq.heappop(self._queue)
                getattr(self, f"_on_{kind}")(*payload)
            for _ in range(20):  # a cycle that preempted is followed by another at once
                again = self._cycle()
                if self.audit:
                    self.violations.extend(check_invariants(self, list(self.active.values())))
                if not again:
                    break
            if self._waits:
                self._flush_waiting()
            if self.observe:
                self.observe(self)
            if self.dirty:
                self.violations.extend(check_invariants(self, list(self.dirty.values())))
                self.dirty = {}
        return self.summary(self.last_t if self.until is None else self.until)

    # -- event handlers -----------------------------------------------------------------------
    def _on_submit(self, spec: JobSpec) -> None:
        qid, _ = self.quotas[spec.quota]
        problem = never_fits(
            self.sizes[qid],
            workers=spec.workers,
            gpus_per_worker=spec.gpus_per_worker,
            idle=spec.idle_resources,
            node_gpus=self.pool_gpus.get(self._pool_of(spec.quota), ()),
            tree=self.tree_of[qid] if self.has_tree else (),
        )
        if problem:  # the console refuses it at submission: never created (docs/simulator.md)
            self._out({"job": spec.name, "refused": problem})
            self.refused[spec.name] = problem
            return
        job = SimJob(len(self.jobs) + 1, spec, qid, self.t)
        self.jobs[spec.name] = job
        self.job_by_id[job.id] = job
        self.active[job.id] = job
        self._job_event(job, S.PENDING, "submitted")

    def _pool_of(self, quota_name: str) -> tuple[str, str]:
        quota = self.quotas[quota_name][1]
        return (quota.resource_type, quota.gpu_type)

    def _on_action(self, action) -> None:
        if action.kind in ("cordon", "uncordon"):
            return self.nodes[action.target].set_cordoned(action.kind == "cordon")
        if action.kind in ("node_down", "node_up"):
            return self._node_action(action)
        job = self.jobs.get(action.target)
        if job is None:
            if action.target in self.refused:
                return self._refuse(action, "the job was refused at submission")
            return self._refuse(action, "the job has not been submitted yet")
        if action.kind == "restart":
            if job.status not in FINAL_JOB_STATUSES:
                return self._refuse(action, f"the job is still {job.status}; stop it first")
            spec = job.spec.__class__(**{**job.spec.__dict__, "name": action.new_name})
            return self._on_submit(spec)
        if job.status in FINAL_JOB_STATUSES:
            return self._refuse(action, f"the job is already {job.status}")
        final = S.STOPPED if action.kind == "stop" else S.TERMINATED
        self.request_stop(job, final, f"{final.lower()} by the user")

    def _refuse(self, action, reason: str) -> None:
        self._out({"job": action.target, "action": action.kind, "refused": reason})

    def _on_pods_running(self, job: SimJob, attempt: int) -> None:
        if job.attempt != attempt:
            return
        for pod in job.pods:
            if pod.status == P.STARTING and not pod.node.down:
                self._pod_event(pod, P.RUNNING)
        self._derive(job)
        self._progress(job)

    def _on_work(self, job: SimJob, token: int) -> None:
        """A scheduled moment of the attempt's work: completion or an injected failure."""
        if token != job.token:
            return
        job.settle(self.t)
        for failure in job.failures_due():
            job.fired.add(failure)
            if failure.hang:
                job.hung = True
                job.settle(self.t)
                ft = job.spec.ft
                if ft and ft.hang_detection:
                    self._push(self.t + ft.hang_timeout, "hang_check", job, job.attempt)
            else:
                self._worker_exits(job, failure)
                return
        if job.work_remaining() <= 1e-9 and not job.hung:
            for pod in job.pods:
                if pod.status in (P.RUNNING,):
                    self._pod_event(pod, P.SUCCEEDED, "exited 0")
            self._derive(job)
            return
        self._progress(job)

    def _worker_exits(self, job: SimJob, failure) -> None:
        pod = job.pods[failure.worker]
        job.exit_failure = Failure(FailureKind.EXIT, pod.rank, failure.exit_code, failure.message)
        status = P.SUCCEEDED if failure.exit_code == 0 else P.FAILED
        reason = f"exited {failure.exit_code}" + (f": {failure.message}" if failure.message else "")
        pod.exit_code, pod.reason = failure.exit_code, failure.message
        self._pod_event(pod, status, reason)
        self._derive(job)

    def _on_hang_check(self, job: SimJob, attempt: int) -> None:
        if job.attempt != attempt or job.status != S.RUNNING or not job.hung:
            return
        ft = job.spec.ft
        state = hang.HangInput(ft.hang_timeout, at(job.running_since), at(job.hung_at))
        if not hang.is_hung(state, at(self.t)):
            return
        self._fault(job, Failure(FailureKind.HANG, None, None, hang.hang_reason(state, at(self.t))))

    def _on_kill(self, pod: SimPod) -> None:
        if pod.status not in FINAL_POD_STATUSES and not pod.node.down:
            self._pod_event(pod, pod.stop_as, pod.stop_reason)
            self._derive(pod.job)

    def _on_lost(self, node: SimNode, epoch: int) -> None:
        if not node.down or node.epoch != epoch:
            return
        for pod in list(node.pods):
            if pod.status not in FINAL_POD_STATUSES:
                self._pod_event(pod, P.LOST, "node lost")
                pod.job.lost_node = True
                self._derive(pod.job)

    def _on_wake(self) -> None:
        pass  # a deadline passed (backoff, protection, hold, cool-down): the cycle looks again

    def _node_action(self, action) -> None:
        node = self.nodes[action.target]
        if action.kind == "node_down" and not node.down:
            node.set_down(True)
            node.epoch += 1
            for pod in list(node.pods):
                if pod.status in (P.STARTING, P.RUNNING):
                    pod.job.settle(self.t)
                    self._pod_event(pod, P.UNKNOWN, "node not reachable")
                    self._progress(pod.job)
            self._push(self.t + self.cfg.node_lost_timeout, "lost", node, node.epoch)
        elif action.kind == "node_up" and node.down:
            node.set_down(False)
            for pod in list(node.pods):
                if pod.status == P.UNKNOWN:
                    # Processes lived on; a stop ordered meanwhile is carried out now.
                    if pod.stop_as is not None:
                        self._pod_event(pod, pod.stop_as, pod.stop_reason)
                    else:
                        ready = pod.job.admitted_t + self.cfg.start_delay <= self.t
                        self._pod_event(pod, P.RUNNING if ready else P.STARTING)
                    self._derive(pod.job)
                    self._progress(pod.job)

    # -- summary ------------------------------------------------------------------------------
    def summary(self, end: float) -> dict:
        return summary_of(self, end)
