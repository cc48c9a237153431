"""Idle GPUs beside a job that fits them: issue 10's last liveness property, as a pure
check over a `Simulation`'s state (read only; nothing here decides anything for the run).

A waiting job *fits* now when all of these hold:
- it is Pending or Inqueue, not backing off after a restart (`not_before`), and no worker of
  an earlier attempt still holds resources;
- it needs GPUs (a CPU-only job leaves no GPU idle);
- its whole gang fits the free GPUs of the schedulable (not NotReady, not cordoned) nodes of
  its quota's resource type and GPU type: the sum over those nodes of free // per-worker is
  at least its worker count;
- quota room per its idle mode, without preempting anyone: `Off` when its own quota's
  charged GPUs (in quota or lent) plus its need stay within the quota; `Only Idle Resources`
  when one lender (its own quota on General-purpose; on Lingjun any quota of its tenant,
  resource type and GPU type, except one that reclaimed it within the cool-down) has that
  many GPUs uncharged, or on Lingjun when those lenders' uncharged GPUs together host every
  worker (each worker charged to one lender); `Acceptable` when either holds.

It is excused while an explicit, time-limited reservation may apply: another waiting job of
the same pool with a guarantee (`Off`/`Acceptable`, within its quota's size, needing GPUs,
its gang hostable on the pool's schedulable nodes once they drain) that has waited at least
`reserve_after_s` in this attempt (the starvation rule holds its quota or reserves nodes for
it until it starts). The excuse is deliberately generous: it may cover a job plan() would
not hold back; it never flags one that plan() rightly holds back.
"""

from policy.statuses import FINAL_POD_STATUSES, WAITING_JOB_STATUSES, IdleResources


def fitting_waiters(sim) -> dict[str, str]:
    """Waiting jobs that fit idle GPUs now and no reservation excuses: name → how it fits."""
    waiting = [job for job in sim.active.values() if _waits(sim, job)]
    if not waiting:
        return {}
    free: dict[tuple[str, str], list[int]] = {}  # pool → free GPUs of each schedulable node
    size: dict[tuple[str, str], list[int]] = {}  # pool → GPUs of each schedulable node
    for node in sim.nodes.values():
        if node.down or node.cordoned:
            continue
        key = (node.spec.resource_type, node.spec.gpu_type)
        free.setdefault(key, []).append(len(node.free))
        size.setdefault(key, []).append(node.spec.gpus)
    quotas = {qid: q for qid, q in sim.quotas.values()}
    holders = [job for job in waiting if _may_hold(sim, job, quotas, size)]
    out: dict[str, str] = {}
    for job in waiting:
        spec, quota = job.spec, quotas[job.quota_id]
        need = spec.workers * spec.gpus_per_worker
        key = (quota.resource_type, quota.gpu_type)
        if not need or sum(f // spec.gpus_per_worker for f in free.get(key, ())) < spec.workers:
            continue
        if any(h is not job and _pool(h, quotas) == key for h in holders):
            continue
        how = _room(sim, job, quotas, need)
        if how:
            out[job.name] = how
    return out


def _waits(sim, job) -> bool:
    if job.status not in WAITING_JOB_STATUSES:
        return False
    if job.not_before is not None and job.not_before > sim.t:
        return False
    return all(p.status in FINAL_POD_STATUSES for p in job.pods)


def _pool(job, quotas) -> tuple[str, str]:
    quota = quotas[job.quota_id]
    return (quota.resource_type, quota.gpu_type)


def _may_hold(sim, job, quotas, size) -> bool:
    spec = job.spec
    if spec.idle_resources == IdleResources.ONLY or not spec.gpus_per_worker:
        return False
    if spec.workers * spec.gpus_per_worker > quotas[job.quota_id].gpus:
        return False
    hosts = sum(s // spec.gpus_per_worker for s in size.get(_pool(job, quotas), ()))
    if hosts < spec.workers:
        return False
    since = job.wait_since if job.attempt > 1 else job.submitted_t
    return sim.t - since >= sim.options.reserve_after_s


def _room(sim, job, quotas, need: int) -> str:
    quota, mode = quotas[job.quota_id], job.spec.idle_resources
    if mode != IdleResources.ONLY and sim.charged[job.quota_id] + need <= quota.gpus:
        return f"in quota {quota.name}"
    if mode == IdleResources.OFF:
        return ""
    cooling = {
        lender for lender, when in job.reclaimed_by if sim.t - when < sim.options.reclaim_cooldown_s
    }
    if quota.resource_type == "Lingjun":
        lenders = [
            qid
            for qid, q in quotas.items()
            if (q.tenant, q.resource_type, q.gpu_type)
            == (quota.tenant, quota.resource_type, quota.gpu_type)
        ]
    else:
        lenders = [job.quota_id]
    lenders = [qid for qid in lenders if qid not in cooling]
    for qid in lenders:
        if quotas[qid].gpus - sim.charged[qid] >= need:
            return f"idle resources of {quotas[qid].name}"
    # Lingjun: each worker may be charged to its own lender (docs/scheduling.md, pooled lenders).
    each = job.spec.gpus_per_worker
    if quota.resource_type == "Lingjun" and len(lenders) > 1:
        hosts = sum(max(quotas[q].gpus - sim.charged[q], 0) // each for q in lenders)
        if hosts >= job.spec.workers:
            names = ", ".join(sorted(quotas[q].name for q in lenders))
            return f"idle resources of {names} (pooled)"
    return ""
