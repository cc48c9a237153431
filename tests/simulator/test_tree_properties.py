"""Property tests over random quota trees (docs/quota-tree.md): the simulator checks, after
every cycle (audit mode), that no quota's pods hold more than its own guarantee, no
subtree's jobs more than its `max_gpus` and no subtree lends more than its
`lending_limit`; an invalid tree (children above their parent) is refused naming a field."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine import Simulation
from simulator.scenario import ScenarioError, parse

IDLE = ["Off", "Acceptable", "Only Idle Resources"]


@st.composite
def trees(draw, depth: int = 3):
    """A tree (up to 3 levels) whose children's gpus never sum above their parent's."""
    quotas: list[dict] = []

    def grow(name: str, gpus: int, parent: str | None, level: int) -> None:
        q: dict = {"name": name, "gpus": gpus}
        if parent is None:
            q.update(tenant="acme", resource_type="Lingjun", gpu_type="H200")
        else:
            q["parent"] = parent
        if draw(st.booleans()):
            q["max_gpus"] = gpus + draw(st.integers(0, 12))
        if draw(st.booleans()):
            q["lending_limit"] = draw(st.integers(0, gpus + 2))
        q["weight"] = draw(st.sampled_from([1, 2, 0.5]))
        quotas.append(q)
        left = gpus
        for i in range(draw(st.integers(0, 3)) if level < depth else 0):
            child = draw(st.integers(0, left))
            left -= child
            grow(f"{name}{i}", child, name, level + 1)

    for r in range(draw(st.integers(1, 2))):
        grow(f"r{r}", draw(st.integers(0, 24)), None, 1)
    return quotas


@st.composite
def scenarios(draw):
    quotas = draw(trees())
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        q = draw(st.sampled_from(quotas))
        jobs.append(
            {"name": f"j{i}", "submit_at": draw(st.integers(0, 1200)), "quota": q["name"],
             "workers": draw(st.integers(1, 2)), "gpus_per_worker": draw(st.integers(1, 8)),
             "work": draw(st.integers(10, 1500)), "priority": draw(st.integers(0, 2)),
             "idle_resources": draw(st.sampled_from(IDLE)),
             "checkpoint_every": draw(st.sampled_from([0, 200]))}
        )  # fmt: skip
    return {
        "settings": {"min_runtime_before_reclaim": draw(st.sampled_from([0, 300]))},
        "tenants": ["acme"],
        "nodes": [{"name": "n", "count": draw(st.integers(1, 4)), "gpus": 8}],
        "quotas": quotas,
        "jobs": jobs,
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_trees_never_break_a_guarantee_a_limit_or_a_lending_limit(raw):
    sim = Simulation(parse(raw), until=50_000, audit=True)
    summary = sim.run()
    assert summary["invariant_violations"] == []
    # Every job the console accepted ends (nothing waits forever beside its capacity).
    assert all(j["status"] not in ("Pending", "Inqueue") for j in summary["jobs"].values())


@settings(max_examples=30, deadline=None)
@given(trees(), st.data())
def test_children_above_their_parent_are_refused_naming_a_field(quotas, data):
    parents = [q for q in quotas if any(c.get("parent") == q["name"] for c in quotas)]
    if not parents:
        return
    parent = data.draw(st.sampled_from(parents))
    child = next(c for c in quotas if c.get("parent") == parent["name"])
    child["gpus"] = parent["gpus"] + 1  # now above the parent alone
    raw = {"tenants": ["acme"], "nodes": [{"name": "n", "gpus": 8}], "quotas": quotas}
    with pytest.raises(ScenarioError, match=r"^quotas\[\d+\]\.(gpus|max_gpus)"):
        parse(raw)


@pytest.mark.parametrize(
    ("quota", "field"),
    [
        ({"name": "c", "parent": "nope", "gpus": 1}, r"quotas\[1\]\.parent: unknown quota"),
        ({"name": "c", "parent": "r", "gpus": 1, "tenant": "other"}, r"quotas\[1\]\.parent"),
        ({"name": "c", "parent": "r", "gpus": 1, "gpu_type": "H100"}, r"quotas\[1\]\.parent"),
        ({"name": "c", "parent": "r", "gpus": 1, "resource_type": "General-purpose"}, "parent"),
        ({"name": "c", "parent": "r", "gpus": 4, "max_gpus": 3}, r"quotas\[1\]\.max_gpus"),
        ({"name": "c", "parent": "r", "gpus": 1, "lending_limit": -1}, r"\.lending_limit"),
        ({"name": "c", "parent": "r", "gpus": 1, "weight": 0}, r"quotas\[1\]\.weight"),
        ({"name": "c", "parent": "r", "gpus": 9}, r"\.gpus: the children of 'r'"),
    ],
)
def test_an_invalid_tree_names_the_field(quota, field):
    root = {"name": "r", "tenant": "acme", "resource_type": "Lingjun", "gpu_type": "H200"}
    raw = {"tenants": ["acme", "other"], "nodes": [{"name": "n", "gpus": 8}],
           "quotas": [{**root, "gpus": 8}, quota]}  # fmt: skip
    with pytest.raises(ScenarioError, match=field):
        parse(raw)


def test_a_cycle_of_parents_is_refused():
    raw = {"tenants": ["acme"], "nodes": [{"name": "n", "gpus": 8}],
           "quotas": [{"name": "a", "parent": "b", "gpus": 0, "tenant": "acme"},
                      {"name": "b", "parent": "a", "gpus": 0, "tenant": "acme"}]}  # fmt: skip
    with pytest.raises(ScenarioError, match=r"quotas\[0\]\.parent: a cycle"):
        parse(raw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fair_share_preemption_never_cycles_between_borrowers(raw):
    raw["settings"]["fair_share_preemption"] = 1
    sim = Simulation(parse(raw), until=50_000, audit=True)
    summary = sim.run()
    assert summary["invariant_violations"] == []
    assert all(j["status"] not in ("Pending", "Inqueue") for j in summary["jobs"].values())
    quota_of = {j["name"]: j["quota"] for j in raw["jobs"]}
    by_instant: dict[float, set[tuple[str, str]]] = {}
    for e in sim.events:
        reason = e.get("reason", "")
        if "to" not in e or not reason.startswith("preempted for the fair share of quota"):
            continue
        preemptor = reason.split("quota ", 1)[1].split(" ", 1)[0]
        after = float(reason.split(": ", 1)[1].split(" GPUs per weight after")[0])
        before = float(reason.split("after, ", 1)[1].split(" for quota")[0])
        assert after <= before  # Kueue's rule: the preemptor's share after <= the victim's
        pairs = by_instant.setdefault(e["t"], set())
        pair = (preemptor, quota_of[e["job"]])
        assert (pair[1], pair[0]) not in pairs  # nobody preempts back at the same moment
        pairs.add(pair)
