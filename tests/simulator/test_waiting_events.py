"""Reasons and queue positions while a job waits, as simulator events (issue 10 item 7).

plan()'s `QueueDecision`s are the only source of the wording (the console writes the same
ones to the job row); the simulator writes an event only when a waiting job's reason or
position changes, and a job that can never be placed says so."""

import itertools

import pytest

from policy.scheduler.plan import plan
from simulator.engine import Simulation
from simulator.scenario import ScenarioError, parse
from simulator.world import at


def node(name: str, count: int = 1, gpus: int = 8) -> dict:
    return {"name": name, "count": count, "resource_type": "Lingjun", "gpu_type": "H200",
            "gpus": gpus}  # fmt: skip


def quota(name: str, gpus: int) -> dict:
    return {"name": name, "tenant": "acme", "resource_type": "Lingjun", "gpu_type": "H200",
            "gpus": gpus}  # fmt: skip


def job(name: str, at_: float, workers: int = 1, gpus: int = 8, work: float = 100, **kw) -> dict:
    return {"name": name, "submit_at": at_, "quota": "team-a", "workers": workers,
            "gpus_per_worker": gpus, "work": work} | kw  # fmt: skip


def scenario(jobs, nodes=None, quotas=None, actions=(), **settings) -> dict:
    return {"settings": settings, "tenants": ["acme"], "nodes": nodes or [node("h", 2)],
            "quotas": quotas or [quota("team-a", 16)], "jobs": jobs,
            "actions": list(actions)}  # fmt: skip


def simulate(raw: dict, until: float | None = None) -> Simulation:
    sim = Simulation(parse(raw), until=until, audit=True)
    assert sim.run()["invariant_violations"] == []
    return sim


def waits(sim: Simulation, name: str) -> list[tuple[float, str, int]]:
    """(t, reason, position) of every waiting event of the job, Pending → Inqueue included."""
    return [
        (e["t"], e["reason"], e["position"])
        for e in sim.events
        if e.get("job") == name and (e.get("to") == "Inqueue" or e.get("status") == "Inqueue")
    ]


def test_pending_to_inqueue_carries_the_position():
    sim = simulate(scenario([job("a", 0, 2), job("b", 10), job("c", 20)]))
    first = [e for e in sim.events if e.get("to") == "Inqueue"]
    assert [(e["job"], e["position"]) for e in first] == [("b", 1), ("c", 2)]


def test_position_moves_up_when_a_job_ahead_starts():
    # a holds both nodes; b (2x8) and c, d (1x8) wait. When a ends, b starts and c, d move
    # up; when b ends, both start.
    sim = simulate(scenario([job("a", 0, 2, work=500), job("b", 10, 2), job("c", 20),
                             job("d", 30)]))  # fmt: skip
    assert [(t, p) for t, _, p in waits(sim, "c")] == [(20, 2), (530, 1)]
    assert [(t, p) for t, _, p in waits(sim, "d")] == [(30, 3), (530, 2)]


def test_no_event_while_nothing_about_the_job_changes():
    # Unrelated jobs come and go on another quota: w's reason and position stay the same,
    # so its only waiting event is Pending → Inqueue, however many cycles run.
    others = [job(f"o{i}", i * 50, quota="team-b", work=30) for i in range(20)]
    raw = scenario([job("big", 0, 1, work=5000), job("w", 5, 2), *others],
                   nodes=[node("h", 2)], quotas=[quota("team-a", 16), quota("team-b", 8)],
                   reserve_after=10**6)  # fmt: skip
    sim = simulate(raw)
    assert len(waits(sim, "w")) == 1
    for name in {e["job"] for e in sim.events if "job" in e}:
        seen = waits(sim, name)
        repeats = [a for a, b in itertools.pairwise(seen) if a[1:] == b[1:]]
        assert repeats == [], f"{name} repeated an unchanged reason: {repeats}"


def test_a_job_that_can_never_be_placed_says_so_and_starts_when_the_node_returns():
    # g (2x8) fits its quota, but one of the two nodes is lost: it can never be placed while
    # the pool stays as it is, and says so; when the node comes back, it starts.
    raw = scenario([job("r", 0, work=1000), job("g", 10, 2)],
                   actions=[{"at": 100, "node_down": "h-1"}, {"at": 5000, "node_up": "h-1"}],
                   reserve_after=10**6)  # fmt: skip
    sim = simulate(raw)
    reasons = [r for _, r, _ in waits(sim, "g")]
    assert reasons[-1].startswith("can never be placed while the pool stays as it is")
    assert "(1 NotReady)" in reasons[-1]
    assert not any("can be placed now" in r for r in reasons)
    started = next(e for e in sim.events if e.get("job") == "g" and e.get("to") == "Starting")
    assert started["t"] == 5000


def test_cordon_keeps_pods_running_and_takes_no_new_work():
    actions = [{"at": 50, "cordon": "h-0"}, {"at": 3000, "uncordon": "h-0"}]
    raw = scenario([job("r", 0, work=1000), job("n", 100)], nodes=[node("h", 1)],
                   quotas=[quota("team-a", 8)], actions=actions)  # fmt: skip
    sim = simulate(raw)
    summary = sim.summary(sim.last_t)["jobs"]
    assert summary["r"]["status"] == "Completed" and summary["r"]["finished_at"] == 1030
    assert waits(sim, "n")[-1][1].endswith("(1 cordoned)")
    assert summary["n"]["first_running_at"] == 3030


def test_an_acceptable_job_shows_both_sides():
    raw = scenario([job("r", 0, 2, work=1000),
                    job("acc", 10, idle_resources="Acceptable")])  # fmt: skip
    reason = waits(simulate(raw), "acc")[0][1]
    assert reason.startswith("quota team-a: 16/16 GPUs in use, job needs 8; idle resources:")


@pytest.mark.parametrize("until", [15, 600, 1100, 1700])
def test_the_last_event_is_what_plan_says_now(until):
    # The wording is plan()'s, not the simulator's: at any moment, each waiting job's last
    # event is exactly the reason and position plan() gives on the current snapshot.
    jobs = [job("a", 0, 2, work=1000), job("b", 10, 2), job("c", 12, idle_resources="Acceptable"),
            job("d", 14, work=300, priority=2), job("e", 1200, 1, 4)]  # fmt: skip
    sim = simulate(scenario(jobs, actions=[{"at": 1500, "cordon": "h-0"}]), until=until)
    decided = plan(sim.snapshot(), at(until), sim.options)
    assert decided.admissions == ()  # the instant's cycles already ran
    for q in decided.queued:
        name = sim.job_by_id[q.job_id].name
        assert waits(sim, name)[-1][1:] == (q.reason, q.position), name


def test_cordon_of_an_unknown_node_is_an_invalid_scenario():
    with pytest.raises(ScenarioError, match=r"actions\[0\]\.cordon: unknown node 'x'"):
        parse(scenario([job("a", 0)], actions=[{"at": 1, "cordon": "x"}]))
