"""Property test: random clusters, quotas and job streams (with stops, idle modes, fault
tolerance and failures) run through the simulator, which checks the docs/simulator.md invariants
after every scheduling cycle (audit mode) and every lifecycle transition."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.statuses import ALLOWED_TRANSITIONS, JobStatus
from simulator.engine import Simulation
from simulator.scenario import parse

POOLS = [("Lingjun", "H200"), ("Lingjun", "H100"), ("General-purpose", "H200")]
IDLE = ["Off", "Acceptable", "Only Idle Resources"]


@st.composite
def scenarios(draw):
    tenants = ["t0", "t1"][: draw(st.integers(1, 2))]
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        rt, gt = draw(st.sampled_from(POOLS))
        nodes.append(
            {"name": f"n{i}", "count": draw(st.integers(1, 3)), "resource_type": rt,
             "gpu_type": gt, "gpus": draw(st.sampled_from([4, 8]))}
        )  # fmt: skip
    largest = {}
    for n in nodes:
        key = (n["resource_type"], n["gpu_type"])
        largest[key] = max(largest.get(key, 0), n["gpus"])
    quotas = []
    for i in range(draw(st.integers(1, 4))):
        rt, gt = draw(st.sampled_from(sorted(largest)))
        quotas.append(
            {"name": f"q{i}", "tenant": draw(st.sampled_from(tenants)), "resource_type": rt,
             "gpu_type": gt, "gpus": draw(st.integers(0, 24)),
             "preemption": draw(st.sampled_from(["Never", "LowerPriority"]))}
        )  # fmt: skip
    jobs = []
    for i in range(draw(st.integers(1, 10))):
        q = draw(st.sampled_from(quotas))
        top = largest[(q["resource_type"], q["gpu_type"])]
        job = {
            "name": f"j{i}",
            "submit_at": draw(st.integers(0, 1500)),
            "quota": q["name"],
            "workers": draw(st.integers(1, 3)),
            "gpus_per_worker": draw(st.integers(1, top)),
            "work": draw(st.integers(10, 2000)),
            "priority": draw(st.integers(0, 3)),
            "idle_resources": draw(st.sampled_from(IDLE)),
            "checkpoint_every": draw(st.sampled_from([0, 100, 500])),
        }
        if draw(st.booleans()):
            job["fault_tolerance"] = {"max_restarts": draw(st.integers(0, 2))}
            if draw(st.booleans()):
                job["failures"] = [
                    {"after_work": draw(st.integers(1, 500)), "worker": 0, "exit_code": 1,
                     "message": draw(st.sampled_from(["NCCL timeout", "SyntaxError: x"])),
                     "attempt": 1}
                ]  # fmt: skip
        jobs.append(job)
    actions = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["stop", "terminate"]))
        actions.append(
            {"at": draw(st.integers(0, 3000)), kind: draw(st.sampled_from(jobs))["name"]}
        )
    return {
        "settings": {"min_runtime_before_reclaim": draw(st.sampled_from([0, 300])),
                     "reserve_after": draw(st.sampled_from([0, 600]))},
        "tenants": tenants, "nodes": nodes, "quotas": quotas, "jobs": jobs, "actions": actions,
    }  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_scenarios_keep_every_invariant(raw):
    sim = Simulation(parse(raw), until=50_000, audit=True)
    summary = sim.run()
    assert summary["invariant_violations"] == []
    # Every job transition written is one the lifecycle allows.
    seen: dict[str, JobStatus] = {}
    for event in sim.events:
        if "to" in event:
            if "from" in event:
                assert seen[event["job"]] == event["from"]
                assert JobStatus(event["to"]) in ALLOWED_TRANSITIONS[JobStatus(event["from"])]
            seen[event["job"]] = JobStatus(event["to"])
    # Pods hold GPUs from Starting to their final event, never two copies of a rank.
    assert {j["status"] for j in summary["jobs"].values()} <= {s.value for s in JobStatus}
