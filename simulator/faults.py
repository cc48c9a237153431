"""The simulator's stops, faults and restarts (a mixin of `engine.Simulation`; split out of
engine.py): a job's status follows its workers through `policy.derive.derive_job_transitions`,
restarts are decided by `policy.faulttolerance.policy.decide`. Nothing here is policy."""

from policy.derive import PodView, derive_job_transitions
from policy.faulttolerance.policy import Action, Failure, FailureKind, decide
from policy.statuses import FINAL_POD_STATUSES, JobStatus, PodStatus
from simulator.world import SimJob

S, P = JobStatus, PodStatus


class Lifecycle:
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
