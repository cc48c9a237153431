"""Every tests/scenarios/*.yaml runs through the simulator and must produce exactly the
event sequence in its .expected file, with every docs/simulator.md invariant holding.

To write a new .expected file: SCENARIOS_WRITE=1 pytest tests/simulator/test_scenarios.py,
then read it line by line before committing it (it is the specification of that case).
"""

import os
from pathlib import Path

import pytest
import yaml

from simulator.engine import Simulation
from simulator.scenario import parse
from tests.simulator.render import render

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml"))


def run(path: Path) -> tuple[list[str], dict]:
    sim = Simulation(parse(yaml.safe_load(path.read_text())))
    summary = sim.run()
    return [render(e) for e in sim.events], summary


def test_there_are_at_least_ten_scenarios():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_produces_its_expected_events(path):
    lines, summary = run(path)
    assert summary["invariant_violations"] == []
    expected_file = path.with_suffix(".expected")
    if os.environ.get("SCENARIOS_WRITE") and not expected_file.exists():
        expected_file.write_text("\n".join(lines) + "\n")
    expected = expected_file.read_text().splitlines()
    assert lines == expected
