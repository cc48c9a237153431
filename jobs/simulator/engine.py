"""The simulator: a discrete-event loop with a simulated clock around the real pure code.

It never reimplements policy (docs/simulator.md): scheduling is `jobs.scheduler.plan.plan`,
job status follows its workers through `jobs.derive.derive_job_transitions`, every job
transition is checked with `jobs.statuses.is_allowed`, restarts are decided by
`jobs.faulttolerance.policy.decide` and hangs judged by `jobs.faulttolerance.hang`.
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

from jobs.derive import PodView, derive_job_transitions
from jobs.faulttolerance import hang
from jobs.faulttolerance.policy import Action, Failure, FailureKind, decide
from jobs.scheduler.fit import QuotaSize, never_fits
from jobs.scheduler.model import Snapshot
from jobs.scheduler.plan import PlanOptions, plan
from jobs.simulator.scenario import JobSpec, Scenario
from jobs.simulator.views import snapshot_of, summary_of
from jobs.simulator.world import SimJob, SimNode, SimPod, Violation, at, check_invariants
from jobs.statuses import (
    FINAL_JOB_STATUSES,
    FINAL_POD_STATUSES,
    IdleResources,
    JobStatus,
    PodStatus,
    is_allowed,
)

S, P = JobStatus, PodStatus


class Simulation:
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
        self.preemptible = {qid: q.preemption == "LowerPriority" for qid, q in self.quotas.values()}
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
            )
            for qid, q in self.quotas.values()
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

    # -- stops, faults, restarts --------------------------------------------------------------
    def request_stop(self, job: SimJob, final: JobStatus, reason: str) -> None:
        if job.status in (S.PENDING, S.INQUEUE):
            self._job_event(job, final, reason)
            job.finished_t = self.t
            return
        if job.stop_final is not None and final != S.TERMINATED:
            return  # a stop is already under way
        job.stop_final, job.stop_reason = final, reason
        pod_status = {S.STOPPED: P.STOPPED, S.TERMINATED: P.TERMINATED, S.PREEMPTED: P.PREEMPTED}
        grace = 0 if final == S.TERMINATED else self.cfg.stop_grace
        self._stop_pods(job, pod_status[final], reason, grace)
        self._derive(job)

    def _stop_pods(self, job: SimJob, stop_as: PodStatus, reason: str, grace: float) -> None:
        job.settle(self.t)
        for pod in job.pods:
            if pod.status in FINAL_POD_STATUSES:
                continue
            pod.stop_as, pod.stop_reason = stop_as, reason
            if pod.node.down:
                continue  # the order waits for the node (or its loss)
            if job.hung and grace > 0:
                self._push(self.t + grace, "kill", pod)  # stuck: killed when grace ends
            else:
                self._pod_event(pod, stop_as, reason)

    def _fault(self, job: SimJob, failure: Failure) -> None:
        """A hang (or a failure found by the monitor): ask the policy, then act."""
        decision = decide(job.spec.ft, job.counters(), failure)
        if decision.action == Action.STOP:
            self.request_stop(job, S.STOPPED, decision.reason)
        elif decision.action in (Action.RESTART_JOB, Action.RESTART_WORKER):
            self._stop_pods(job, P.STOPPED, decision.reason, self.cfg.stop_grace)
            job.pending_restart = decision
            self._derive(job)
        else:
            job.pending_fail = decision.reason
            self._stop_pods(job, P.STOPPED, decision.reason, self.cfg.stop_grace)
            self._derive(job)

    def _derive(self, job: SimJob) -> None:
        """Job status from its workers (the production rule), then fault tolerance."""
        if job.pending_restart or job.pending_fail:
            if all(p.status in FINAL_POD_STATUSES for p in job.pods):
                if job.pending_restart:
                    self._restart(job, job.pending_restart)
                else:
                    self._end(job, S.FAILED, job.pending_fail)
            return
        views = [PodView(p.rank, p.status, p.exit_code, p.reason) for p in job.pods]
        changes = derive_job_transitions(
            job.status,
            views,
            stop_requested=job.stop_final is not None,
            stop_final_status=job.stop_final or S.STOPPED,
            stop_reason=job.stop_reason,
        )
        for change in changes:
            if change.to_status == S.FAILED and job.spec.ft:
                if job.lost_node:
                    lost = min(p.rank for p in job.pods if p.status == P.LOST)
                    failure = Failure(FailureKind.NODE_LOST, worker_rank=lost)
                else:
                    failure = job.exit_failure or Failure(FailureKind.EXIT)
                decision = decide(job.spec.ft, job.counters(), failure)
                if decision.action in (Action.RESTART_JOB, Action.RESTART_WORKER):
                    job.pending_restart = decision
                    self._stop_pods(job, P.STOPPED, f"job restarting: {decision.reason}", 0)
                    return self._derive(job)
                return self._end(job, S.FAILED, decision.reason, stop_rest=True)
            if change.to_status in (S.FAILED, S.COMPLETED, S.STOPPED, S.TERMINATED):
                return self._end(job, change.to_status, change.reason, stop_rest=True)
            if change.to_status == S.PREEMPTED:
                self._note_preempted(job)
                self._end(job, S.PREEMPTED, change.reason)
                self.preemption_count += 1
                failure = Failure(FailureKind.PREEMPTED, message=change.reason)
                decision = decide(job.spec.ft, job.counters(), failure) if job.spec.ft else None
                job.preemptions += 1
                if decision and decision.action == Action.RESTART_JOB:
                    self._restart(job, decision, counted=True)
                return
            self._job_event(job, change.to_status, change.reason)
            if change.to_status == S.RUNNING:
                job.running_since = self.t
                if job.first_running_t is None:
                    job.first_running_t = self.t
                self._progress(job)

    def _note_preempted(self, job: SimJob) -> None:
        """What the next plans need to know about a preemption (as the console's rows
        would tell): when (the per-hour cap) and which lenders reclaimed it (cool-down).
        The loop wakes when either stops mattering."""
        job.preempted_times.append(self.t)
        self._push(self.t + 3600, "wake")
        lenders = {p.charged_to for p in job.pods if not p.in_quota and p.status == P.PREEMPTED}
        for lender in sorted(lenders):
            job.reclaimed_by.append((lender, self.t))
        if lenders:
            self._push(self.t + self.options.reclaim_cooldown_s, "wake")

    def _end(self, job: SimJob, status: JobStatus, reason: str, stop_rest: bool = False) -> None:
        job.settle(self.t)
        job.advancing_since = None
        if stop_rest:
            self._stop_pods(job, P.STOPPED, f"job {status.lower()}: {reason}", 0)
        if status in (S.FAILED, S.PREEMPTED):  # stopped work is the user's choice, not lost
            job.lose_uncheckpointed()
        self._job_event(job, status, reason)
        job.finished_t = self.t
        job.token += 1

    def _restart(self, job: SimJob, decision, counted: bool = False) -> None:
        """A new attempt back in Pending (Automatic Fault Tolerance)."""
        if not counted:
            job.lose_uncheckpointed()
            if decision.consumes_budget:
                job.restarts += 1
            elif job.lost_node:
                job.node_losses += 1
        self._job_event(job, S.PENDING, decision.reason)
        job.new_attempt(self.t)
        if decision.backoff_seconds:
            job.not_before = self.t + decision.backoff_seconds
            self._push(job.not_before, "wake")

    def _progress(self, job: SimJob) -> None:
        """(Re)start the work clock and schedule the next moment that matters."""
        job.settle(self.t)
        running = (
            job.status == S.RUNNING
            and job.stop_final is None
            and not job.pending_restart
            and not job.pending_fail
            and all(p.status == P.RUNNING for p in job.pods)
            and not job.hung
        )
        job.advancing_since = self.t if running else None
        job.token += 1
        if running:
            step = job.next_moment()
            self._push(self.t + step, "work", job, job.token)

    # -- scheduling ---------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return snapshot_of(self)

    @staticmethod
    def _may_move_home(job: SimJob) -> bool:
        """A borrowing Acceptable job: plan() may move its charge home (docs/scheduling.md)."""
        return job.spec.idle_resources == IdleResources.ACCEPTABLE and any(
            not p.in_quota and p.status not in FINAL_POD_STATUSES for p in job.pods
        )

    def _move_home(self, job: SimJob, quota_id: int, reason: str) -> None:
        """Each live pod re-charged to the job's own quota, in quota: a pod event with its
        status unchanged and the new `charged_to`/`in_quota` (what the console's row shows)."""
        for pod in job.pods:
            if pod.status in FINAL_POD_STATUSES or pod.in_quota:
                continue
            self.charged[pod.charged_to] -= len(pod.gpus)
            self.charged[quota_id] += len(pod.gpus)
            pod.charged_to, pod.in_quota = quota_id, True
            self._pod_event(pod, pod.status, reason)

    def _cycle(self) -> bool:
        """One scheduling cycle. Returns whether another should follow at once."""
        if not any(
            j.status in (S.PENDING, S.INQUEUE) or self._may_move_home(j)
            for j in self.active.values()
        ):
            return False  # nothing waits, no charge to move home: nothing to decide
        snapshot = self.snapshot()
        if not snapshot.jobs and not any(self._may_move_home(j) for j in self.active.values()):
            return False  # the waiting ones are backing off
        decided = plan(snapshot, at(self.t), self.options)
        for move in decided.charges_home:
            self._move_home(self.job_by_id[move.job_id], move.quota_id, move.reason)
        for admission in decided.admissions:
            job = self.job_by_id[admission.job_id]
            self._job_event(job, S.STARTING, admission.reason)
            job.admitted_t = self.t
            for i, p in enumerate(admission.placements):
                node = self.node_by_id[p.node_id]
                pod = SimPod(job, p.rank, job.attempt, node, p.gpu_indices)
                pod.charged_to, pod.in_quota, pod.started_t = (
                    admission.charge_of(i),  # each pod its own lender (pooled idle jobs)
                    admission.in_quota,
                    self.t,
                )
                node.hold(pod)
                job.pods.append(pod)
                self._pod_event(pod, P.STARTING)
            self._push(self.t + self.cfg.start_delay, "pods_running", job, job.attempt)
            if not admission.in_quota and self.options.min_runtime_before_reclaim_s:
                # The production loop reclaims once the protection ends: so does this one.
                self._push(self.t + self.options.min_runtime_before_reclaim_s, "wake")
        self._queued(decided.queued)
        for p in decided.preemptions:
            victim = self.job_by_id[p.job_id]
            victim.preempted_by = p.for_job_id
            self.request_stop(victim, S.PREEMPTED, p.reason)
        return bool(decided.preemptions)

    # -- summary ------------------------------------------------------------------------------
    def summary(self, end: float) -> dict:
        return summary_of(self, end)
