"""Simulator: pooled lenders (each pod charged to one) and Acceptable moving its charge home."""

from pathlib import Path

import yaml

from policy.statuses import FINAL_POD_STATUSES
from simulator.engine import Simulation
from simulator.scenario import parse

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def simulate(name: str) -> tuple[Simulation, dict]:
    sim = Simulation(parse(yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())))
    return sim, sim.run()


def peak_charge(sim: Simulation) -> dict[str, int]:
    """Replays the pod events: the most GPUs ever charged to each quota at once."""
    held: dict[tuple, tuple[str, int]] = {}  # (job, rank, attempt) → (lender, GPUs)
    now: dict[str, int] = {}
    peak: dict[str, int] = {}
    for e in sim.events:
        if "pod" not in e:
            continue
        key = (e["job"], e["pod"], e["attempt"])
        if key in held:  # the charge may have moved since the pod started
            lender, gpus = held.pop(key)
            now[lender] -= gpus
        if e["pod_status"] not in {str(s) for s in FINAL_POD_STATUSES}:
            held[key] = (e["charged_to"], e["gpus"])
            now[e["charged_to"]] = now.get(e["charged_to"], 0) + e["gpus"]
            peak[e["charged_to"]] = max(peak.get(e["charged_to"], 0), now[e["charged_to"]])
    return peak


def test_an_only_idle_gang_pools_two_lenders_then_one_reclaims_it():
    sim, summary = simulate("lingjun_pooled_lenders")
    assert summary["invariant_violations"] == []
    started = {e["pod"]: e["charged_to"] for e in sim.events
               if e.get("job") == "i1" and e.get("pod_status") == "Starting"}  # fmt: skip
    assert started == {0: "team-b", 1: "team-c"}
    jobs = summary["jobs"]
    assert jobs["i1"]["status"] == "Preempted" and jobs["b1"]["status"] == "Completed"
    assert peak_charge(sim) == {"team-b": 8, "team-c": 8}  # never above either quota


def test_an_acceptable_borrower_moves_home_and_is_not_reclaimed_when_the_lender_returns():
    sim, summary = simulate("acceptable_moves_charge_home")
    assert summary["invariant_violations"] == []
    moves = [e for e in sim.events if e.get("job") == "acc" and "pod" in e]
    assert [(e["t"], e["charged_to"], e["in_quota"]) for e in moves][-2:] == [
        (630, "team-a", True),
        (3630, "team-a", True),
    ]
    jobs = summary["jobs"]
    assert jobs["acc"]["preemptions"] == 0 and jobs["acc"]["work_lost"] == 0
    assert jobs["acc"]["status"] == jobs["b1"]["status"] == "Completed"
    assert summary["preemptions"] == 0
    assert peak_charge(sim) == {"team-a": 8, "team-b": 8}
