"""The simulator's scheduling cycle (a mixin of `engine.Simulation`; split out of
engine.py): the real `plan()` on the snapshot the console would load, its admissions,
preemptions and charge moves (home and away, docs/quota-tree.md) carried out on the
simulated world."""

from policy.scheduler.model import ChargeMove, Snapshot
from policy.scheduler.plan import plan
from policy.statuses import FINAL_POD_STATUSES, IdleResources, JobStatus, PodStatus
from simulator.views import snapshot_of
from simulator.world import SimJob, SimPod, at

S, P = JobStatus, PodStatus


class Scheduling:
    def snapshot(self) -> Snapshot:
        return snapshot_of(self)

    @staticmethod
    def _may_move_home(job: SimJob) -> bool:
        """A borrowing Acceptable job: plan() may move its charge home (docs/scheduling.md)."""
        return job.spec.idle_resources == IdleResources.ACCEPTABLE and any(
            not p.in_quota and p.status not in FINAL_POD_STATUSES for p in job.pods
        )

    def _move_charge(self, job: SimJob, move: ChargeMove) -> None:
        """Each live borrowing pod re-charged to `move.quota_id` (home, in quota; or another
        lender, still not in quota): a pod event with its status unchanged and the new
        `charged_to`/`in_quota` (what the console's row shows). Usage splits at this instant."""
        for pod in job.pods:
            if pod.status in FINAL_POD_STATUSES or pod.in_quota:
                continue
            self._settle_charge(pod)
            self.charged[pod.charged_to] -= len(pod.gpus)
            self.charged[move.quota_id] += len(pod.gpus)
            pod.charged_to, pod.in_quota = move.quota_id, move.in_quota
            self._pod_event(pod, pod.status, move.reason)

    def _settle_charge(self, pod: SimPod) -> None:
        """The pod's GPU-seconds under its current charge, up to now (the summary's quotas)."""
        key = (pod.job.quota_id, pod.charged_to)
        seconds = len(pod.gpus) * (self.t - pod.charged_since)
        self.charge_seconds[key] = self.charge_seconds.get(key, 0.0) + seconds
        pod.charged_since = self.t

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
            self._move_charge(self.job_by_id[move.job_id], move)
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
                pod.charged_since = self.t
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
