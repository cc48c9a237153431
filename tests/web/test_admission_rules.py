"""The admission rules of a new job as a plain function: fields and facts in, problems out.

No database: the facts are written out here (the page and the API load them through
jobs.admission.facts, tested at the end with its query count).
"""

from dataclasses import replace

import pytest

from jobs.admission.facts import check_job
from policy.admission.rules import ALL, Facts, PoolFacts, QuotaFacts, WorkspaceFacts, check
from tests.conftest import make_node

QUOTA = QuotaFacts(
    id=1, name="team-a", resource_type="Lingjun", gpu_type="H200", gpus=16, tenant_gpus=24
)
ONE_WORKSPACE = (WorkspaceFacts(10, "ws-a"),)
TWO_WORKSPACES = (WorkspaceFacts(10, "ws-a"), WorkspaceFacts(11, "ws-b"))
POOL = PoolFacts(count=2, most_gpus=8, most_cpus=128, most_memory=1024, fitting=2, node_gpus=(8, 8))
FACTS = Facts(quota=QUOTA, workspaces=ONE_WORKSPACE, pool=POOL)
GOOD = {"quota": "team-a", "image": "busybox", "command": "echo hi", "gpus_per_worker": 2}

# (changes to GOOD, facts, expected problems: field -> messages)
CASES = {
    "a good job": ({}, FACTS, {}),
    "no quota": ({"quota": "  "}, FACTS, {"quota": ["This field is required."]}),
    "unknown quota": ({"quota": "nope"}, Facts(), {"quota": ["Unknown quota 'nope'."]}),
    "quota of no workspace of mine": (
        {},
        Facts(quota=QUOTA),
        {"quota": ["Quota team-a is not bound to any of your workspaces."]},
    ),
    "several workspaces, none picked": (
        {},
        Facts(quota=QUOTA, workspaces=TWO_WORKSPACES, pool=POOL),
        {
            "workspace": [
                "Quota team-a is bound to several of your workspaces (ws-a, ws-b); pick one."
            ]
        },
    ),
    "workers out of bounds": (
        {"workers": 65},
        FACTS,
        {"workers": ["Workers must be between 1 and 64."]},
    ),
    "workers not a number": ({"workers": "two"}, FACTS, {"workers": ["Enter a whole number."]}),
    "name too long": (
        {"name": "n" * 201},
        FACTS,
        {"name": ["Ensure this value has at most 200 characters (it has 201)."]},
    ),
    "unknown choice": (
        {"idle_resources": "Sometimes"},
        FACTS,
        {
            "idle_resources": [
                "Select a valid choice. Sometimes is not one of the available choices."
            ]
        },
    ),
    "device variable": (
        {"env": {"CUDA_VISIBLE_DEVICES": "0"}},
        FACTS,
        {
            "env": [
                "CUDA_VISIBLE_DEVICES cannot be set: each worker sees exactly the GPUs it was "
                "given (the agent sets the device variables)"
            ]
        },
    ),
    "no nodes": (
        {},
        Facts(quota=QUOTA, workspaces=ONE_WORKSPACE),
        {"quota": ["No Lingjun H200 nodes are registered, so jobs on quota team-a cannot run."]},
    ),
    "more CPUs than any node": (
        {"cpus_per_worker": 200},
        FACTS,
        {"cpus_per_worker": ["No Lingjun H200 node has 200 CPUs; the largest has 128."]},
    ),
    "no node has it all at once": (
        {},
        Facts(quota=QUOTA, workspaces=ONE_WORKSPACE, pool=replace(POOL, fitting=0)),
        {ALL: ["No single Lingjun H200 node has 2 GPUs, 4 CPUs and 16 GB at once."]},
    ),
}


@pytest.mark.parametrize("changes, facts, expected", CASES.values(), ids=CASES.keys())
def test_rules_table(changes, facts, expected):
    verdict = check(GOOD | changes, facts)
    assert verdict.problems == expected
    assert verdict.ok is (not expected)


def test_a_good_job_takes_the_defaults_and_its_name_from_the_image():
    verdict = check(GOOD | {"image": "nvcr.io/nvidia/pytorch:24.01-py3"}, FACTS)
    assert verdict.ok and verdict.workspace == ONE_WORKSPACE[0]
    values = verdict.values
    assert (values["name"], values["workers"], values["cpus_per_worker"]) == ("pytorch", 1, 4)
    assert (values["priority"], values["idle_resources"], values["env"]) == (1, "Off", {})
    assert values["quota"] == QUOTA


def test_problems_come_field_by_field_first_then_across_fields():
    """The order a reader meets them (and the API's first message): the fields as the page
    lays them out, then what the quota and its nodes say."""
    verdict = check(GOOD | {"priority": 0, "image": "a b", "cpus_per_worker": 200}, FACTS)
    assert list(verdict.problems) == ["image", "priority", "cpus_per_worker"]
    assert "cpus_per_worker" not in verdict.values  # a problem across fields unsets it too


def test_a_job_larger_than_every_lender_together_never_fits():
    """A Lingjun idle job larger than its quota may pool the lenders' whole workers; if even
    those cannot hold it, it is refused rather than left waiting."""
    facts = Facts(quota=QUOTA, workspaces=ONE_WORKSPACE, pool=POOL, lenders=(16, 8))
    job = GOOD | {"workers": 4, "gpus_per_worker": 8, "idle_resources": "Acceptable"}
    verdict = check(job, facts)
    assert list(verdict.problems) == ["workers"]


def test_the_adapter_loads_the_facts_in_a_constant_number_of_queries(
    django_assert_num_queries, researcher, workspace, quota, other_quota
):
    for i in range(5):
        make_node(f"node-{i}", gpus=4 if i == 0 else 8)
    raw = GOOD | {"quota": "team-a"}
    # The quota (with its tenant's GPUs), the bound workspaces, the node pool.
    with django_assert_num_queries(3):
        checked = check_job(raw, researcher)
    assert checked.ok and checked.quota == quota and checked.workspace == workspace
    # A Lingjun idle job larger than its quota also reads the lenders: one more.
    big = raw | {"workers": 3, "gpus_per_worker": 8, "idle_resources": "Acceptable"}
    with django_assert_num_queries(4):
        checked = check_job(big, researcher)
    assert checked.problems == {}
    # An unknown quota stops at the lookup.
    with django_assert_num_queries(1):
        assert list(check_job(raw | {"quota": "nope"}, researcher).problems) == ["quota"]
