"""Property test of plan() alone: random snapshots (with running borrowers and in-quota jobs)
never produce an over-committed quota or node, a split gang, a borrow outside docs/scheduling.md's
rules, or a victim that is not reclaimable by the job it is preempted for."""

from collections import Counter
from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import GENERAL, LINGJUN, T0, job, node, quota, running, snapshot

POOLS = [(LINGJUN, "H200"), (LINGJUN, "H100"), (GENERAL, "H200")]


@st.composite
def snapshots(draw):
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        rt, gt = draw(st.sampled_from(POOLS))
        busy = draw(st.integers(0, 8))
        nodes.append(node(i, resource_type=rt, gpu_type=gt, free=tuple(range(busy, 8))))
    quotas = []
    for i in range(draw(st.integers(1, 4))):
        rt, gt = draw(st.sampled_from(sorted({n.pool for n in nodes}) + POOLS[:1]))
        quotas.append(
            quota(
                i + 1,
                name=f"q{i}",
                resource_type=rt,
                gpu_type=gt,
                gpus=draw(st.integers(0, 32)),
                tenant=draw(st.integers(1, 2)),
                preemption=draw(st.sampled_from(["Never", "LowerPriority"])),
            )
        )
    # Running jobs occupy the busy GPUs of each node (one per node, charged somewhere legal).
    held, used, borrowed = [], Counter(), Counter()
    for n in nodes:
        gpus = 8 - len(n.free_gpu_indices)
        same = [q for q in quotas if q.pool == n.pool]
        if not gpus or not same:
            continue
        charged = draw(st.sampled_from(same))
        in_quota = draw(st.booleans())
        owner = (
            charged
            if in_quota or charged.resource_type == GENERAL
            else draw(st.sampled_from([q for q in same if q.tenant_id == charged.tenant_id]))
        )
        held.append(replace(
            running(100 + n.id, on={n.id: gpus}, quota=owner.id, charged=charged.id,
                    in_quota=in_quota, priority=draw(st.integers(0, 3)),
                    started=draw(st.integers(0, 100))),
            # A borrowing Acceptable job may move its charge home.
            idle_resources=draw(st.sampled_from(list(IdleResources))),
        ))  # fmt: skip
        used[charged.id] += gpus
        borrowed[charged.id] += 0 if in_quota else gpus
    quotas = [
        q.__class__(**{**{f: getattr(q, f) for f in q.__slots__}, "used_gpus": used[q.id],
                       "borrowed_gpus": borrowed[q.id]})
        for q in quotas
    ]  # fmt: skip
    jobs = [
        job(
            j,
            quota=draw(st.integers(1, len(quotas))),
            workers=draw(st.integers(1, 3)),
            gpus=draw(st.integers(1, 8)),
            priority=draw(st.integers(0, 4)),
            at=draw(st.integers(0, 60)),
            idle=draw(st.sampled_from(list(IdleResources))),
        )
        for j in range(1, draw(st.integers(1, 12)))
    ]
    return snapshot(nodes, quotas, jobs, held)


@settings(max_examples=150, deadline=None)
@given(snapshots(), st.sampled_from([0, 600]), st.sampled_from([0, 3000]))
def test_plan_never_overcommits_or_breaks_the_borrowing_rules(snap, min_runtime, reserve):
    now = T0 + timedelta(minutes=120)
    options = PlanOptions(min_runtime_before_reclaim_s=min_runtime, reserve_after_s=reserve)
    result = plan(snap, now, options)
    quotas = {q.id: q for q in snap.quotas}
    jobs = {j.id: j for j in snap.jobs}
    nodes = {n.id: n for n in snap.nodes}
    charged = Counter({q.id: q.used_gpus for q in snap.quotas})
    taken: dict[int, list[int]] = {}
    for a in result.admissions:
        j = jobs[a.job_id]
        own = quotas[j.quota_id]
        assert len(a.placements) == j.workers  # the whole gang
        for i, p in enumerate(a.placements):
            assert len(p.gpu_indices) == j.gpus_per_worker
            assert set(p.gpu_indices) <= set(nodes[p.node_id].free_gpu_indices)
            assert nodes[p.node_id].pool == own.pool
            taken.setdefault(p.node_id, []).extend(p.gpu_indices)
            lender = quotas[a.charge_of(i)]  # each pod its own lender (pooled idle jobs)
            charged[lender.id] += j.gpus_per_worker
            if a.in_quota:
                assert lender.id == own.id and j.idle_resources != IdleResources.ONLY
            else:
                assert j.idle_resources != IdleResources.OFF
                assert lender.pool == own.pool and lender.tenant_id == own.tenant_id
                if own.resource_type == GENERAL:
                    assert lender.id == own.id
    guaranteed = Counter({q.id: q.used_gpus - q.borrowed_gpus for q in snap.quotas})
    moved = {m.job_id for m in result.charges_home}
    for m in result.charges_home:
        r = next(r for r in snap.running if r.id == m.job_id)
        assert not r.in_quota and m.pods == len(r.gpus_by_node)
        for lender in r.lenders:
            charged[lender] -= r.gpus_charged_to(lender)
        charged[m.quota_id] += r.gpus
        if m.in_quota:  # moves home: Acceptable borrowers only, to their quota
            assert r.idle_resources == IdleResources.ACCEPTABLE and m.quota_id == r.quota_id
            guaranteed[r.quota_id] += r.gpus
        else:  # moved to another lender (docs/quota-tree.md): within the borrowing rules
            own, target = quotas[r.quota_id], quotas[m.quota_id]
            assert target.pool == own.pool and target.tenant_id == own.tenant_id
            assert own.resource_type != GENERAL and m.quota_id not in r.lenders
    for a in result.admissions:
        if a.in_quota:
            guaranteed[a.charged_quota_id] += jobs[a.job_id].total_gpus
    for indices in taken.values():
        assert len(indices) == len(set(indices)), "GPU double-booked"
    for q in snap.quotas:
        assert charged[q.id] <= max(q.gpus, q.used_gpus), f"{q.name} over-committed"
        before = q.used_gpus - q.borrowed_gpus
        assert guaranteed[q.id] <= max(q.gpus, before), f"{q.name} guarantee over-committed"
    victims = {r.id: r for r in snap.running}
    for p in result.preemptions:
        v, preemptor = victims[p.job_id], jobs[p.for_job_id]
        own = quotas[preemptor.quota_id]
        # Off and Acceptable have the guaranteed path (docs/scheduling.md); Only Idle never
        # preempts.
        assert preemptor.idle_resources != IdleResources.ONLY
        # Capacity charged to the preemptor's quota, or (docs/scheduling.md, the decision
        # table: reclaim does not depend on which lender a borrower is charged to) a borrower
        # of its tenant's pool on the GPUs its gang needs.
        lender = quotas[v.charged_quota_id]
        assert v.charged_quota_id == own.id or (
            not v.in_quota and lender.pool == own.pool and lender.tenant_id == own.tenant_id
        )
        if v.in_quota:
            assert own.preemption == "LowerPriority" and v.priority < preemptor.priority
        assert not v.stopping
        assert v.id not in moved  # a job moved home is in quota: never reclaimed for it
    assert not {p.for_job_id for p in result.preemptions} & {a.job_id for a in result.admissions}
    # Eligibility after subtracting the victims: the preemptor then fits its quota.
    for preemptor_id in {p.for_job_id for p in result.preemptions}:
        preemptor = jobs[preemptor_id]
        own = quotas[preemptor.quota_id]
        chosen = {p.job_id for p in result.preemptions if p.for_job_id == preemptor_id}
        # Borrowers whose charge moved off this lender free it too (docs/quota-tree.md):
        # moved to another lender, or home to their own quota, which now has room.
        moved_away = {m.job_id for m in result.charges_home if own.id in m.from_quota_ids}
        freeing = [
            r for r in snap.running
            if r.charged_quota_id == own.id
            and (r.id in chosen or r.stopping or r.id in moved_away)
        ]  # fmt: skip
        freed = sum(r.gpus for r in freeing)
        assert own.used_gpus - freed + preemptor.total_gpus <= own.gpus
