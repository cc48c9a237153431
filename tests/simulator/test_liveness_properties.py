"""Property test (issue 10): whole random scenarios (one Lingjun or General-purpose pool)
with CPU-only jobs, quotas larger than their pool, nodes that go silent (and are lost past
the timeout) or are cordoned a while, and fault-tolerant borrowers. Every run must end,
every job that was not refused must end in a final status, no job is preempted more than
the per-hour cap allows, and no GPU sits idle while a job that fits it waits longer than one
cycle (outside a time-limited reservation)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.scheduler.plan import PlanOptions
from policy.statuses import FINAL_JOB_STATUSES
from simulator.engine import Simulation
from simulator.idle import fitting_waiters
from simulator.scenario import parse

IDLE = ["Off", "Acceptable", "Only Idle Resources"]
HORIZON = 400_000  # far beyond any run that ends; only bounds a regression


@st.composite
def scenarios(draw):
    groups = draw(st.integers(1, 3))
    rt = draw(st.sampled_from(["Lingjun", "General-purpose"]))
    nodes = [
        {"name": f"n{i}", "count": draw(st.integers(1, 2)), "resource_type": rt,
         "gpu_type": "H200", "gpus": draw(st.sampled_from([4, 8]))}
        for i in range(groups)
    ]  # fmt: skip
    largest = max(n["gpus"] for n in nodes)
    pool = sum(n["count"] * n["gpus"] for n in nodes)
    quotas = [
        {"name": f"q{i}", "tenant": "acme", "resource_type": rt, "gpu_type": "H200",
         # up to twice the pool: quotas larger than their pool are the point
         "gpus": draw(st.integers(0, 2 * pool)),
         "preemption": draw(st.sampled_from(["Never", "LowerPriority"]))}
        for i in range(draw(st.integers(1, 3)))
    ]  # fmt: skip
    jobs = []
    for i in range(draw(st.integers(1, 10))):
        job = {
            "name": f"j{i}",
            "submit_at": draw(st.integers(0, 2000)),
            "quota": draw(st.sampled_from(quotas))["name"],
            "workers": draw(st.integers(1, 3)),
            "gpus_per_worker": draw(st.integers(0, largest)),  # 0: CPU-only
            "work": draw(st.integers(10, 3000)),
            "priority": draw(st.integers(0, 2)),
            "idle_resources": draw(st.sampled_from(IDLE)),
            "checkpoint_every": draw(st.sampled_from([0, 300])),
        }
        if draw(st.booleans()):
            job["fault_tolerance"] = {"max_restarts": 2}
        jobs.append(job)
    actions = []
    names = [f"n{i}-{k}" for i, n in enumerate(nodes) for k in range(n["count"])]
    for _ in range(draw(st.integers(0, 2))):
        node, down = draw(st.sampled_from(names)), draw(st.integers(0, 3000))
        # Silent for a while (lost past node_lost_timeout), then back: a node that never
        # returns would leave jobs needing the whole pool waiting, rightly.
        actions.append({"at": down, "node_down": node})
        actions.append({"at": down + draw(st.integers(60, 1200)), "node_up": node})
    for _ in range(draw(st.integers(0, 2))):  # cordoned a while: its pods run on
        node, cordon = draw(st.sampled_from(names)), draw(st.integers(0, 3000))
        actions.append({"at": cordon, "cordon": node})
        actions.append({"at": cordon + draw(st.integers(60, 1200)), "uncordon": node})
    return {
        "settings": {"min_runtime_before_reclaim": draw(st.sampled_from([0, 300])),
                     "reserve_after": draw(st.sampled_from([0, 600])),
                     "node_lost_timeout": 300},
        "tenants": ["acme"], "nodes": nodes, "quotas": quotas, "jobs": jobs,
        "actions": actions,
    }  # fmt: skip


class IdleWhileFitting:
    """Observes a run after each instant's cycles: a job that fits idle GPUs (see
    simulator.idle) at two observations in a row waited longer than one cycle."""

    def __init__(self) -> None:
        self.before: dict[str, str] = {}
        self.found: list[str] = []

    def __call__(self, sim) -> None:
        now = fitting_waiters(sim)
        now = {
            n: how
            for n, how in now.items()
            if not _behind_a_claim(sim, how) and not _behind_a_release(sim, n)
        }
        for name, how in now.items():
            if name in self.before:
                self.found.append(f"t={sim.t:g}: {name} fits idle GPUs ({how}) and waits")
        self.before = now


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_run_ends_with_every_job_final_and_bounded_preemption(raw):
    idle = IdleWhileFitting()
    sim = Simulation(parse(raw), until=HORIZON, audit=True, observe=idle)
    summary = sim.run()
    assert summary["invariant_violations"] == []
    # No GPU sits idle while a job that fits it waits longer than one cycle, except behind
    # an explicit, time-limited reservation (the starvation hold, a backoff, a cool-down).
    assert idle.found == [], f"{idle.found[:3]} in {raw}"
    # Lingjun idle jobs larger than every single lender pool several (issue 10 item 4), so
    # no job is left out here any more.
    waiting = {n: j["status"] for n, j in summary["jobs"].items() if j["status"] not in FINAL}
    assert waiting == {}, f"never ended: {waiting} in {raw}"
    assert sim.last_t < HORIZON
    cap = PlanOptions().max_preemptions_per_hour
    preempted: dict[str, list[float]] = {}
    for event in sim.events:
        if event.get("to") == "Preempted":
            preempted.setdefault(event["job"], []).append(event["t"])
    for name, times in preempted.items():
        for i, start in enumerate(times):
            within = [t for t in times[i:] if t < start + 3600]
            assert len(within) <= cap, f"{name} preempted {len(within)} times in an hour"


FINAL = {s.value for s in FINAL_JOB_STATUSES}


def _behind_a_release(sim, name: str) -> bool:
    """A job of a quota whose GPUs being released are claimed by the first job in line
    (plan()'s claim: started meanwhile, it would be preempted again by that job). Time-limited:
    the release ends when the victims exit, or their node is declared lost."""
    return any(
        j.name == name and "first in line for the GPUs being released" in (j.queue_reason or "")
        for j in sim.active.values()
    )


def _behind_a_claim(sim, how: str) -> bool:
    """A borrower may wait beside idle GPUs of a lender that keeps them for a guaranteed job
    of its own waiting for capacity to drain (plan()'s demand claim: lent, they would be
    reclaimed at once, the loop of issue 10 item 2). Time-limited: running jobs end. A job
    that can never be placed claims nothing (test_liveness.py), so it is not excused here."""
    if not how.startswith("idle resources of "):
        return False
    lenders = how.removeprefix("idle resources of ").removesuffix(" (pooled)").split(", ")
    return any(
        j.spec.quota in lenders
        and j.spec.idle_resources != "Only Idle Resources"
        and j.status in ("Pending", "Inqueue")
        and not (j.queue_reason or "").startswith("can never be placed")
        for j in sim.active.values()
    )
