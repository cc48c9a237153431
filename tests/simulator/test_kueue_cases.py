"""Kueue's own scheduler and preemption test cases, translated into scenarios
(tests/scenarios/kueue/, each file citing its upstream test; docs/scheduling.md maps the
concepts). Each must produce exactly its .expected events with every invariant holding, and
preempt exactly the jobs the upstream test expects (its `wantPreempted`)."""

from pathlib import Path

import pytest

from tests.simulator.test_scenarios import run

KUEUE = Path(__file__).resolve().parent.parent / "scenarios" / "kueue"
FILES = sorted(KUEUE.glob("*.yaml"))

# Upstream expectation per case: the jobs preempted (pkg/scheduler/preemption/*_test.go).
PREEMPTED = {
    "preempt_lowest_priority": {"low"},
    "preempt_multiple": {"low", "mid"},
    "no_preemption_for_low_priority": set(),
    "not_enough_low_priority_workloads": set(),
    "some_free_quota_preempt_low_priority": {"low"},
    "minimal_set_excludes_low_priority": {"mid"},
    "reclaim_quota_from_borrower": {"c2-mid"},
    "do_not_reclaim_same_priority_lower_priority": set(),
    "reclaim_same_priority_any": {"c1-1"},
    "preempt_newer_same_priority": {"new"},
    "fair_cant_preempt_when_it_would_switch_the_imbalance": set(),
    "fair_reclaim_borrowable_quota_from_user_using_the_most": {"b4"},
    "fair_cant_preempt_when_everyone_under_nominal": set(),
    "hierarchical_avoid_queues_within_nominal_quota": {"admitted2"},
    "hierarchical_preempt_multiple_with_hierarchical_advantage": {"admitted1", "admitted2"},
}


def test_at_least_ten_kueue_cases_each_with_its_upstream_expectation():
    assert len(FILES) >= 10
    assert {p.stem for p in FILES} == set(PREEMPTED)
    for path in FILES:
        assert "Kueue: pkg/scheduler/" in path.read_text(), f"{path.name} cites no upstream test"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_kueue_case(path):
    lines, summary = run(path)
    assert summary["invariant_violations"] == []
    preempted = {line.split()[1].rstrip(":") for line in lines if "-> Preempted" in line}
    assert preempted == PREEMPTED[path.stem]
    assert lines == path.with_suffix(".expected").read_text().splitlines()
