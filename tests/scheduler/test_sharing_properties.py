"""Property tests of docs/scheduling.md's decision table over random quota trees and
workloads (issue: sharing rules under Kueue's own cases):

- no pair of quotas preempts each other back by fair share within the cool-down (a
  borrowing-within-tree preemption is always by a strictly higher priority), and every
  lending limit, `max_gpus` and own guarantee holds after every cycle (the simulator's
  audit), with the sharing options drawn at random;
- a plan does not depend on the order running jobs, quotas and waiting jobs are listed in;
- no guaranteed job waits while borrowers it may reclaim occupy the GPUs it needs;
- the victims chosen for a job are a minimal set: no proper subset admits it (Kueue's
  "minimal set" rule), checked by brute force on small cases.

Examples: `SHARING_PROPERTY_EXAMPLES` (default 200 per plan() test, half that for the
simulator one: 700 in all in CI; `make test-nightly` sets 5,000)."""

import itertools
import os
import random
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from policy.scheduler.model import Snapshot
from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import IdleResources
from simulator.engine import Simulation
from simulator.scenario import parse
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot
from tests.simulator.test_tree_properties import scenarios

EXAMPLES = int(os.environ.get("SHARING_PROPERTY_EXAMPLES", "200"))
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
NOW = T0 + timedelta(hours=1)
COOLDOWN = PlanOptions().reclaim_cooldown_s
RECLAIM = ["Any", "LowerPriority", "Never"]
WITHIN = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]


# -- in the simulator: no ping-pong, limits hold ---------------------------------------------
@settings(max_examples=max(EXAMPLES // 2, 10), deadline=None, suppress_health_check=SLOW)
@given(scenarios(), st.data())
def test_no_quota_preempts_back_within_the_cooldown_and_limits_hold(raw, data):
    raw["settings"]["fair_share_preemption"] = data.draw(st.sampled_from([0, 1, 1]))
    names = [q["name"] for q in raw["quotas"]]
    for i in range(data.draw(st.integers(2, 10))):  # contention: long idle jobs everywhere
        raw["jobs"].append(
            {"name": f"x{i}", "submit_at": data.draw(st.integers(0, 900)),
             "quota": data.draw(st.sampled_from(names)), "workers": 1,
             "gpus_per_worker": data.draw(st.integers(1, 4)), "work": 3000,
             "priority": data.draw(st.integers(0, 2)),
             "idle_resources": data.draw(st.sampled_from(["Only Idle Resources", "Acceptable"]))}
        )  # fmt: skip
    for q in raw["quotas"]:
        q["reclaim_within_tree"] = data.draw(st.sampled_from(RECLAIM))
        q["preemption"] = data.draw(st.sampled_from(WITHIN))
        if data.draw(st.booleans()):
            q["borrow_within_tree_max_priority"] = data.draw(st.integers(0, 2))
    sim = Simulation(parse(raw), until=20_000, audit=True)
    summary = sim.run()
    assert summary["invariant_violations"] == []  # own guarantees, max_gpus, lending limits
    quota_of = {j["name"]: j["quota"] for j in raw["jobs"]}
    seen: list[tuple[float, str, str]] = []  # fair-share preemptions: (when, by, of)
    by_priority = 0
    for e in sim.events:
        reason = e.get("reason", "")
        if e.get("to") != "Preempted":
            continue
        if "borrowing within the tree" in reason:  # borrowWithinCohort: strictly by priority
            over = reason.rsplit("(priority ", 1)[1].rstrip(")").split(" over ")
            assert int(over[0]) > int(over[1]), reason
            by_priority += 1
            continue
        if not reason.startswith("preempted for the fair share of quota "):
            continue
        preemptor = reason.removeprefix("preempted for the fair share of quota ").split()[0]
        victim = quota_of[e["job"]]
        for when, a, b in seen:
            assert not (a == victim and b == preemptor and e["t"] - when < COOLDOWN), (
                f"{preemptor} preempted {victim} back at {e['t']:g} ({a}→{b} at {when:g})"
            )
        seen.append((e["t"], preemptor, victim))
    event(f"{len(seen)} fair-share, {by_priority} borrowing-within-tree preemptions")


# -- plan() alone: random trees with running borrowers ----------------------------------------
@st.composite
def trees_with_work(draw, waiting_jobs: tuple[int, int] = (1, 5)):
    """One tenant's tree (plus a flat quota of a second tenant) on one pool, running jobs in
    quota and borrowing, waiting jobs of every kind; options drawn at random."""
    n = draw(st.integers(2, 6))
    parent = {1: None, **{i: draw(st.integers(1, i - 1)) for i in range(2, n + 1)}}
    own = {i: draw(st.integers(0, 6)) for i in range(1, n + 1)}
    subtree = dict(own)
    for i in range(n, 1, -1):
        subtree[parent[i]] += subtree[i]
    fair = draw(st.booleans())
    quotas = [
        quota(i, name=f"q{i}", gpus=subtree[i], parent_id=parent[i],
              preemption=draw(st.sampled_from(WITHIN)),
              reclaim_within_tree=draw(st.sampled_from(RECLAIM)),
              borrow_within_tree_max_priority=draw(st.sampled_from([None, 1])),
              fair_share_preemption=fair)
        for i in range(1, n + 1)
    ]  # fmt: skip
    quotas.append(quota(n + 1, name="other", gpus=draw(st.integers(0, 6)), tenant=2))
    own[n + 1] = quotas[-1].gpus
    nodes_n = draw(st.integers(1, 3))
    free = {i: 8 for i in range(1, nodes_n + 1)}
    used = {q.id: [0, 0] for q in quotas}  # charged: [all, borrowed]
    held = []
    for r in range(draw(st.integers(0, 6))):
        on = draw(st.sampled_from(sorted(free)))
        gpus = draw(st.integers(1, 4))
        charged = draw(st.sampled_from(quotas))
        if gpus > free[on] or used[charged.id][0] + gpus > own[charged.id]:
            continue
        in_quota = draw(st.booleans())
        owners = [q for q in quotas if q.tenant_id == charged.tenant_id]
        owner = charged if in_quota else draw(st.sampled_from(owners))
        free[on] -= gpus
        used[charged.id][0] += gpus
        used[charged.id][1] += 0 if in_quota else gpus
        held.append(
            replace(
                running(100 + r, on={on: gpus}, quota=owner.id, charged=charged.id,
                        in_quota=in_quota, priority=draw(st.integers(0, 3)),
                        started=draw(st.integers(0, 50))),
                idle_resources=IdleResources.OFF if in_quota else IdleResources.ONLY,
            )
        )  # fmt: skip
    quotas = [replace(q, used_gpus=used[q.id][0], borrowed_gpus=used[q.id][1]) for q in quotas]
    nodes = [node(i, free=tuple(range(8 - free[i], 8))) for i in sorted(free)]
    low, high = waiting_jobs
    waiting = [
        job(j, quota=draw(st.integers(1, n)), workers=draw(st.integers(1, 2)),
            gpus=draw(st.integers(1, 6)), priority=draw(st.integers(0, 4)),
            at=draw(st.integers(0, 55)), idle=draw(st.sampled_from(list(IdleResources))))
        for j in range(1, draw(st.integers(low, high)) + 1)
    ]  # fmt: skip
    return snapshot(nodes, quotas, waiting, held)


def _outcome(result) -> tuple:
    return (
        sorted((a.job_id, a.charged_quota_id, a.in_quota, a.charges) for a in result.admissions),
        sorted((p.job_id, p.for_job_id) for p in result.preemptions),
        sorted((m.job_id, m.quota_id, m.in_quota) for m in result.charges_home),
    )


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SLOW)
@given(trees_with_work(), st.randoms(use_true_random=False))
def test_the_plan_does_not_depend_on_the_order_things_are_listed_in(snap, rnd: random.Random):
    options = PlanOptions(min_runtime_before_reclaim_s=0)
    shuffled = Snapshot(
        nodes=snap.nodes,
        quotas=tuple(rnd.sample(snap.quotas, len(snap.quotas))),
        jobs=tuple(rnd.sample(snap.jobs, len(snap.jobs))),
        running=tuple(rnd.sample(snap.running, len(snap.running))),
    )
    assert _outcome(plan(snap, NOW, options)) == _outcome(plan(shuffled, NOW, options))


def _allowed(snap: Snapshot, waiting) -> list:
    """The table's candidates for one guaranteed job that fits its quota's guarantee:
    borrowers of its tenant's pool it may reclaim (default options), its quota's in-quota
    jobs its quota's preemption within quota allows."""
    q = next(q for q in snap.quotas if q.id == waiting.quota_id)
    tenant = {x.id: x.tenant_id for x in snap.quotas}
    out = []
    for r in snap.running:
        if not r.in_quota and tenant[r.charged_quota_id] == q.tenant_id:
            out.append(r)
        elif r.in_quota and r.quota_id == q.id and q.preemption != "Never":
            newer = r.started_at is not None and r.started_at > waiting.submitted_at
            equal = q.preemption == "LowerOrNewerEqualPriority" and newer
            if r.priority < waiting.priority or (r.priority == waiting.priority and equal):
                out.append(r)
    return out


def _admits(snap: Snapshot, waiting, victims) -> bool:
    """Would the job fit its quota (guarantee and charge) and, by GPU count, the nodes once
    `victims` are gone (flat quotas: the quota's `gpus` is its own guarantee)?"""
    q = next(q for q in snap.quotas if q.id == waiting.quota_id)
    freed_charge = sum(v.gpus for v in victims if v.charged_quota_id == q.id)
    freed_in = sum(v.gpus for v in victims if v.charged_quota_id == q.id and v.in_quota)
    need = waiting.total_gpus
    if q.guaranteed_gpus - freed_in + need > q.gpus or q.used_gpus - freed_charge + need > q.gpus:
        return False
    per_node = {n.id: len(n.free_gpu_indices) for n in snap.nodes}
    for v in victims:
        for node_id, g in v.gpus_by_node:
            per_node[node_id] += g
    return sum(g // waiting.gpus_per_worker for g in per_node.values()) >= waiting.workers


def _single_guaranteed(snap: Snapshot) -> Snapshot:
    """The snapshot with one waiting `Off` job and flat quotas of one pool."""
    quotas = tuple(replace(q, parent_id=None, lending_limit=None, max_gpus=None,
                           fair_share_preemption=False, reclaim_within_tree="Any")
                   for q in snap.quotas)  # fmt: skip
    sizes = {q.id: q for q in quotas}
    own = {q.id: q.gpus for q in quotas}
    for q in snap.quotas:  # flat: each keeps only its own guarantee (children carved out)
        if q.parent_id is not None:
            own[q.parent_id] -= q.gpus
    quotas = tuple(replace(sizes[i], gpus=max(own[i], sizes[i].used_gpus)) for i in sizes)
    first = replace(snap.jobs[0], idle_resources=IdleResources.OFF)
    return replace(snap, quotas=quotas, jobs=(first,))


@st.composite
def crowded(draw):
    """Flat quotas of one tenant on full nodes: small in-quota jobs of q1 and borrowers
    charged to q1 or q2; one waiting `Off` job of q1 with a high priority."""
    nodes, held, used = [], [], {1: [0, 0], 2: [0, 0]}
    policy = draw(st.sampled_from(WITHIN))
    for n in range(1, draw(st.integers(1, 3)) + 1):
        left, at = 8, 0
        while left:
            gpus = draw(st.integers(1, min(3, left)))
            charged = draw(st.sampled_from([1, 2]))
            in_quota = charged == 1 and draw(st.booleans())
            owner = 1 if in_quota else draw(st.sampled_from([1, 2, 3]))
            used[charged][0] += gpus
            used[charged][1] += 0 if in_quota else gpus
            r = running(100 + len(held), on={n: gpus}, quota=owner, charged=charged,
                        in_quota=in_quota, priority=draw(st.integers(0, 3)),
                        started=draw(st.integers(0, 50)))  # fmt: skip
            held.append(replace(r, gpus_by_node=((n, gpus),)))
            left, at = left - gpus, at + gpus
        nodes.append(node(n, free=()))
    quotas = [
        quota(1, name="q1", gpus=used[1][0] + draw(st.integers(0, 2)), used=used[1][0],
              borrowed_gpus=used[1][1], preemption=policy),
        quota(2, name="q2", gpus=used[2][0], used=used[2][0], borrowed_gpus=used[2][1]),
        quota(3, name="q3", gpus=0),
    ]  # fmt: skip
    waiting = job(1, quota=1, workers=draw(st.integers(1, 2)), gpus=draw(st.integers(1, 6)),
                  priority=draw(st.integers(2, 4)), at=draw(st.integers(0, 55)))  # fmt: skip
    return snapshot(nodes, quotas, [waiting], held)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SLOW)
@given(st.one_of(trees_with_work(waiting_jobs=(1, 1)).map(_single_guaranteed), crowded()))
def test_no_guaranteed_job_waits_while_borrowers_it_may_reclaim_hold_its_gpus(snap):
    waiting = snap.jobs[0]
    q = next(q for q in snap.quotas if q.id == waiting.quota_id)
    if q.guaranteed_gpus + waiting.total_gpus > q.gpus:
        return  # short of its own guarantee: only priority preemption could help
    borrowers = [r for r in _allowed(snap, waiting) if not r.in_quota]
    if not _admits(snap, waiting, borrowers):
        return  # even every borrower gone would not let it start
    event("a borrower holds what the job needs" if borrowers else "free GPUs suffice")
    result = plan(snap, NOW, PlanOptions(min_runtime_before_reclaim_s=0))
    acted = (
        result.admission_for(waiting.id) is not None
        or any(p.for_job_id == waiting.id for p in result.preemptions)
        or any(not m.in_quota for m in result.charges_home)
    )
    assert acted, result.decision_for(waiting.id)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SLOW)
@given(st.one_of(trees_with_work(waiting_jobs=(1, 1)).map(_single_guaranteed), crowded()))
def test_the_victims_are_a_minimal_set(snap):
    waiting = snap.jobs[0]
    result = plan(snap, NOW, PlanOptions(min_runtime_before_reclaim_s=0))
    chosen = [r for r in snap.running if any(p.job_id == r.id for p in result.preemptions)]
    event(f"{len(chosen)} victims")
    if not chosen:
        return
    allowed = {r.id for r in _allowed(snap, waiting)}
    assert {r.id for r in chosen} <= allowed  # only what the table allows
    assert _admits(snap, waiting, chosen)
    for k in range(len(chosen)):  # no proper subset would do (Kueue's minimal set)
        for subset in itertools.combinations(chosen, k):
            assert not _admits(snap, waiting, subset), (
                f"{[r.id for r in subset]} would do; chose {[r.id for r in chosen]}"
            )
