"""What a `Simulation` shows the outside: the snapshot plan() is called on (as the console's
cycle would load it from its rows) and docs/simulator.md's summary, over a `Simulation`; split
out of engine.py. The snapshot also forgets finished jobs without live workers.
"""

from policy.scheduler.model import QuotaSnap, RunningSnap, Snapshot
from policy.statuses import FINAL_JOB_STATUSES, FINAL_POD_STATUSES, WAITING_JOB_STATUSES, JobStatus
from simulator.world import SimPod, at

S = JobStatus


def snapshot_of(sim) -> Snapshot:
    """The scheduler's input, as the console's cycle would load it from its rows."""
    nodes = tuple(n.snap() for n in sim.nodes.values())
    used: dict[int, list[int]] = {qid: [0, 0] for qid, _ in sim.quotas.values()}
    running, waiting = [], []
    for job in list(sim.active.values()):
        live = [p for p in job.pods if p.status not in FINAL_POD_STATUSES]
        if job.status in FINAL_JOB_STATUSES and not live:
            del sim.active[job.id]
            continue
        for p in live:
            used[p.charged_to][0] += len(p.gpus)
            if not p.in_quota:
                used[p.charged_to][1] += len(p.gpus)
        if job.status in WAITING_JOB_STATUSES:
            if job.not_before is None or job.not_before <= sim.t:
                waiting.append(job.snap(len(live)))
        elif live and job.status in (S.STARTING, S.RUNNING) and _victim_kind(sim, live[0]):
            running.append(
                RunningSnap(
                    id=job.id,
                    quota_id=job.quota_id,
                    charged_quota_id=live[0].charged_to,
                    in_quota=all(p.in_quota for p in live),
                    charges=_charges(live),
                    pods_in_quota=_in_quota(live),
                    idle_resources=job.spec.idle_resources,
                    priority=job.spec.priority,
                    gpus_by_node=tuple((p.node.id, len(p.gpus)) for p in live),
                    started_at=at(job.admitted_t),
                    last_checkpoint_at=at(job.checkpoint_t) if job.checkpoint_t else None,
                    stopping=job.stop_final is not None or bool(job.pending_restart),
                    name=job.name,
                    preempted_at=tuple(at(t) for t in job.preempted_times),
                )
            )
    quotas = tuple(
        QuotaSnap(
            id=qid,
            name=q.name,
            tenant_id=sim.tenant_ids[q.tenant],
            resource_type=q.resource_type,
            gpu_type=q.gpu_type,
            gpus=q.gpus,
            used_gpus=used[qid][0],
            borrowed_gpus=used[qid][1],
            preemption=q.preemption,
            parent_id=sim.quotas[q.parent][0] if q.parent else None,
            max_gpus=q.max_gpus,
            lending_limit=q.lending_limit,
            weight=q.weight,
            fair_share_preemption=bool(sim.cfg.fair_share_preemption),
            reclaim_within_tree=q.reclaim_within_tree,
            borrow_within_tree_max_priority=q.borrow_within_tree_max_priority,
        )
        for qid, q in sim.quotas.values()
    )
    return Snapshot(nodes, quotas, tuple(waiting), tuple(running))


def _victim_kind(sim, pod: SimPod) -> bool:
    """Only borrowers and jobs of quotas with preemption within quota can be victims."""
    return not pod.in_quota or sim.preemptible[pod.charged_to]


def summary_of(sim, end: float) -> dict:
    """docs/simulator.md's summary line (and what the property tests read)."""
    finished = [j.finished_t for j in sim.jobs.values() if j.finished_t is not None]
    horizon = max(finished) if finished and len(finished) == len(sim.jobs) else end
    total_gpus = sum(n.spec.gpus for n in sim.nodes.values())
    busy = 0.0
    for job in sim.jobs.values():
        busy += job.busy_gpu_seconds
        for p in job.pods:
            if p.status not in FINAL_POD_STATUSES:
                busy += len(p.gpus) * (end - p.started_t)
    jobs = {}
    lost = 0.0
    for job in sim.jobs.values():
        job.settle(end)
        lost += job.work_lost * job.spec.workers * job.spec.gpus_per_worker
        jobs[job.name] = job.summary()
    return {
        "jobs": jobs,
        "gpu_utilization": round(busy / (total_gpus * horizon), 4) if horizon else 0.0,
        "preemptions": sim.preemption_count,
        "refused": sorted(sim.refused),
        "lost_gpu_seconds": round(lost, 3),
        "end": round(end, 3),
        "invariant_violations": [f"t={v.t}: {v.text}" for v in sim.violations],
        "quotas": quota_seconds(sim, end),
    }


def quota_seconds(sim, end: float) -> dict:
    """Per quota, GPU-seconds of its own jobs' pods charged to it (`in_quota`), of its own
    jobs' pods charged elsewhere (`borrowed`) and of other quotas' jobs' pods charged to it
    (`lent`): each pod from Starting to its final status, split at charge moves."""
    out = {
        q.name: {"gpu_seconds_in_quota": 0.0, "gpu_seconds_borrowed": 0.0, "gpu_seconds_lent": 0.0}
        for _, q in sim.quotas.values()
    }
    for (own, charged), seconds in sim.charge_seconds.items():
        _add_seconds(out, sim, own, charged, seconds)
    for job in sim.jobs.values():
        for p in job.pods:
            if p.status not in FINAL_POD_STATUSES:
                seconds = len(p.gpus) * (end - p.charged_since)
                _add_seconds(out, sim, job.quota_id, p.charged_to, seconds)
    return {name: {k: round(v, 3) for k, v in row.items()} for name, row in out.items()}


def _add_seconds(out: dict, sim, own: int, charged: int, seconds: float) -> None:
    if own == charged:
        out[sim.quota_name[own]]["gpu_seconds_in_quota"] += seconds
    else:
        out[sim.quota_name[own]]["gpu_seconds_borrowed"] += seconds
        out[sim.quota_name[charged]]["gpu_seconds_lent"] += seconds


def _in_quota(live: list[SimPod]) -> tuple[bool, ...]:
    """Per live worker, whether it is in quota, when they differ (fair share by pod)."""
    flags = tuple(p.in_quota for p in live)
    return flags if len(set(flags)) > 1 else ()


def _charges(live: list[SimPod]) -> tuple[int, ...]:
    """Per live worker, its lender, when they are not all the same (a pooled idle job)."""
    first = live[0].charged_to
    if all(p.charged_to == first for p in live):
        return ()
    return tuple(p.charged_to for p in live)
