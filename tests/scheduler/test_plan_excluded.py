"""Nodes excluded for one job (retry elsewhere after an ECC/Xid failure), in the pure plan."""

from dataclasses import replace

from policy.scheduler.plan import plan
from tests.scheduler.snaps import T0, job, node, quota, snapshot


def test_an_excluded_node_is_skipped_and_the_job_placed_on_another():
    # node-1 is the tightest fit (4 free) and would be chosen without the exclusion.
    nodes = (node(1, free=(4, 5, 6, 7)), node(2))
    waiting = replace(job(10, gpus=4), excluded_node_ids=frozenset({1}))
    decided = plan(snapshot(nodes=nodes, quotas=(quota(),), jobs=(waiting,)), T0)
    (admission,) = decided.admissions
    assert {p.node_id for p in admission.placements} == {2}
    # Without the exclusion the same job goes to node-1: the exclusion is what moved it.
    plain = plan(snapshot(nodes=nodes, quotas=(quota(),), jobs=(job(10, gpus=4),)), T0)
    assert {p.node_id for p in plain.admissions[0].placements} == {1}


def test_a_job_whose_only_room_is_excluded_waits_and_says_so():
    nodes = (node(1), node(2, free=()))
    waiting = replace(job(10, gpus=8), excluded_node_ids=frozenset({1}))
    decided = plan(snapshot(nodes=nodes, quotas=(quota(),), jobs=(waiting,)), T0)
    assert decided.admissions == ()
    assert decided.decision_for(10).reason == (
        "no node this job may use has room (1 node excluded after an ECC/Xid failure: node-1)"
    )


def test_a_miss_with_exclusions_does_not_block_the_same_shape_for_others():
    nodes = (node(1), node(2, free=()))
    waiting = replace(job(10, gpus=8), excluded_node_ids=frozenset({1}))
    other = job(11, gpus=8, at=1)  # same shape, no exclusions: node-1 is fine for it
    decided = plan(snapshot(nodes=nodes, quotas=(quota(),), jobs=(waiting, other)), T0)
    assert decided.admission_for(10) is None
    assert {p.node_id for p in decided.admission_for(11).placements} == {1}
    # Worded against the state after the plan: node-1 is taken by job 11 now.
    assert decided.decision_for(10).reason == (
        "no node has 8 free H200 GPUs; all H200 GPUs are in use "
        "(1 node excluded after an ECC/Xid failure: node-1)"
    )


def test_the_exclusion_is_named_when_the_pool_is_short_anyway():
    nodes = (node(1, free=(0, 1)), node(2, free=(0, 1, 2)))
    waiting = replace(job(10, gpus=4), excluded_node_ids=frozenset({1}))
    decided = plan(snapshot(nodes=nodes, quotas=(quota(),), jobs=(waiting,)), T0)
    assert decided.decision_for(10).reason == (
        "no node has 4 free H200 GPUs; largest free block is 3 "
        "(1 node excluded after an ECC/Xid failure: node-1)"
    )


def test_an_exclusion_in_another_pool_changes_nothing():
    nodes = (node(1), node(2, gpu_type="A100"))
    waiting = replace(job(10, gpus=8), excluded_node_ids=frozenset({2}))
    decided = plan(snapshot(nodes=nodes, quotas=(quota(),), jobs=(waiting,)), T0)
    assert {p.node_id for p in decided.admission_for(10).placements} == {1}
