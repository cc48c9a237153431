"""The quota tree's rules as a table (policy.tree_rules, pure): what a change may not do."""

import pytest

from policy.tree_rules import QuotaFacts, overcommitted, problems, roots_guarantee

ORG = QuotaFacts(1, "org", 1, "Lingjun", "H200", 32, max_gpus=40)
DEPT_X = QuotaFacts(2, "dept-x", 1, "Lingjun", "H200", 16, parent_id=1, max_gpus=24)
DEPT_Y = QuotaFacts(3, "dept-y", 1, "Lingjun", "H200", 8, parent_id=1)
TEAM = QuotaFacts(4, "team-x1", 1, "Lingjun", "H200", 8, parent_id=2)
OTHER_TENANT = QuotaFacts(5, "globex", 2, "Lingjun", "H200", 64)
A100 = QuotaFacts(6, "a100", 1, "Lingjun", "A100", 64)
GENERAL = QuotaFacts(7, "general", 1, "General-purpose", "H200", 64)
GP = "General-purpose"
TREE = (ORG, DEPT_X, DEPT_Y, TEAM, OTHER_TENANT, A100, GENERAL)


def change(quota: QuotaFacts, **values) -> QuotaFacts:
    from dataclasses import replace

    return replace(quota, **values)


def new(**values) -> QuotaFacts:
    return change(QuotaFacts(None, "new", 1, "Lingjun", "H200", 4), **values)


def test_valid_quotas_have_no_problems():
    assert all(problems(q, TREE) == {} for q in TREE)
    assert problems(new(), TREE) == {}  # a new flat root
    assert problems(new(parent_id=3, gpus=0), TREE) == {}


@pytest.mark.parametrize(
    ("proposed", "field", "message"),
    [
        (new(parent_id=5), "parent", "Quota globex belongs to another tenant."),
        (new(parent_id=6), "parent", "Quota a100 is for A100, not H200."),
        (new(parent_id=7), "parent", "Quota general is General-purpose, not Lingjun."),
        (new(parent_id=99), "parent", "There is no such quota."),
        (change(DEPT_X, parent_id=2), "parent", "A quota cannot be its own parent."),
        (change(ORG, parent_id=4), "parent", "team-x1 is inside this quota's subtree (a cycle)."),
        (change(ORG, parent_id=2), "parent", "dept-x is inside this quota's subtree (a cycle)."),
        (new(parent_id=1, gpus=9), "gpus", "out 33 (9 here, 24 in dept-x, dept-y)."),
        (change(DEPT_Y, gpus=17), "gpus", "org guarantees 32 GPUs; its children would "
         "carve out 33 (17 here, 16 in dept-x)."),
        (change(TEAM, gpus=17), "gpus", "its children would carve out 17 (17 here)."),
        (change(ORG, gpus=23), "gpus", "dept-x, dept-y carve out 24 GPUs; the guarantee "
         "cannot be below that (23)."),
        (change(DEPT_X, gpus=7), "gpus", "carve out 8 GPUs; the guarantee cannot be below "
         "that (7)."),
        (change(DEPT_X, gpu_type="A100", parent_id=None), "gpu_type", "share its GPU type."),
        (change(DEPT_X, resource_type=GP, parent_id=None), "resource_type", "resource type."),
        (change(DEPT_X, tenant_id=2, parent_id=None), "tenant", "belong to its tenant."),
        (change(ORG, max_gpus=31), "max_gpus", "(31 GPUs) is below the guarantee (32 GPUs)."),
        (change(ORG, lending_limit=-1), "lending_limit", "negative (0: it never lends)."),
        (change(ORG, weight=0.0), "weight", "The weight must be a number above 0."),
        (change(ORG, weight=float("nan")), "weight", "The weight must be a number above 0."),
        (change(ORG, gpus=-1, max_gpus=None), "gpus", "The guarantee cannot be negative."),
    ],
)  # fmt: skip
def test_refused_changes_name_the_field(proposed, field, message):
    found = problems(proposed, TREE)
    assert any(m.endswith(message) for m in found.get(field, [])), found


@pytest.mark.parametrize(
    "proposed",
    [
        change(ORG, gpus=24),  # exactly what its children carve out
        change(DEPT_Y, gpus=16),  # the parent's guarantee exactly
        change(DEPT_X, max_gpus=48),  # a child's limit above its parent's: the tightest holds
        change(DEPT_X, lending_limit=100),  # above its guarantee: lends all of it
        change(DEPT_X, lending_limit=0),  # keeps it for the team
        change(DEPT_X, weight=0.25),
        change(TEAM, parent_id=3),  # moves to dept-y (8 of 8)
        change(DEPT_Y, parent_id=None),  # becomes a root
    ],
)
def test_allowed_changes(proposed):
    assert problems(proposed, TREE) == {}


def test_a_flat_quota_passes_every_tree_rule():
    flat = [QuotaFacts(i, f"q{i}", 1, "Lingjun", "H200", 8) for i in range(1, 5)]
    assert all(problems(q, flat) == {} for q in flat)
    assert problems(change(flat[0], gpus=1000), flat) == {}


def test_only_roots_promise_cluster_gpus():
    assert roots_guarantee([ORG, DEPT_X, DEPT_Y, TEAM]) == 32
    assert roots_guarantee([DEPT_X, TEAM]) == 16  # a parent outside the set: a root here
    assert overcommitted(32, 32, "Lingjun", "H200") == ""
    assert overcommitted(40, 32, "Lingjun", "H200") == (
        "The Lingjun H200 quotas guarantee 40 GPUs, but the cluster has 32 H200 GPUs: "
        "not every guarantee can be met at once."
    )
