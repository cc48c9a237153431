"""run_cycle: pooled lenders (each pod its own charge) and Acceptable moving its charge home."""

import pytest

from jobs.models import Pod
from jobs.scheduler import cycle
from jobs.scheduler.cycle import load_snapshot, run_cycle
from policy.statuses import IdleResources, PodStatus
from quotas.models import Quota
from tests.conftest import make_node
from tests.scheduler.conftest import finish_pods
from tests.scheduler.seams import after_plan
from tests.scheduler.test_cycle_reclaim import exit_all


@pytest.fixture
def third_quota(tenant, workspace):
    q = Quota.objects.create(
        tenant=tenant, name="team-c", resource_type="Lingjun", gpu_type="H200", gpus=8
    )
    workspace.quotas.add(q)
    return q


def test_a_pooled_idle_job_charges_each_pod_to_its_lender_and_is_reclaimed_by_one(
    submit, quota, other_quota, third_quota, settings
):
    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0
    make_node("node-0"), make_node("node-1")
    Quota.objects.filter(pk=quota.pk).update(gpus=0)
    pooled = submit(name="i1", workers=2, gpus=8, idle_resources=IdleResources.ONLY)
    assert run_cycle().admitted == (pooled.id,)
    charges = dict(pooled.pods.values_list("rank", "charged_quota_id"))
    assert charges == {0: other_quota.id, 1: third_quota.id}
    assert set(pooled.pods.values_list("in_quota", flat=True)) == {False}
    snapshot, _ = load_snapshot()
    [held] = snapshot.running
    assert held.gpus_charged_to(other_quota.id) == held.gpus_charged_to(third_quota.id) == 8

    owner = submit(name="c1", target=third_quota, gpus=8)
    assert run_cycle().preempted == (pooled.id,)
    exit_all(pooled)
    assert run_cycle().admitted == (owner.id,)
    assert owner.pods.get().charged_quota_id == third_quota.id


def borrow_while_full(submit, quota, workers=1):
    """team-a (8) is full with a1, so the Acceptable job borrows team-b's 8 on node-1."""
    make_node("node-0"), make_node("node-1")
    Quota.objects.filter(pk=quota.pk).update(gpus=8)
    filler = submit(name="a1", gpus=8)
    acc = submit(
        name="acc", workers=workers, gpus=8 // workers, idle_resources=IdleResources.ACCEPTABLE
    )
    assert run_cycle().admitted == (filler.id, acc.id)
    return filler, acc


def test_an_acceptable_borrower_moves_its_charge_home_and_is_not_reclaimed(
    submit, quota, other_quota, settings
):
    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0
    filler, acc = borrow_while_full(submit, quota)
    assert acc.pods.get().charged_quota_id == other_quota.id
    assert run_cycle().charged_home == ()  # team-a is still full
    finish_pods(filler)
    assert run_cycle().charged_home == (acc.id,)
    pod = acc.pods.get()
    assert (pod.charged_quota_id, pod.in_quota) == (quota.id, True)
    # team-b's own job finds its capacity back: no one is reclaimed, it just starts.
    owner = submit(name="b1", target=other_quota, gpus=8)
    result = run_cycle()
    assert (result.admitted, result.preempted) == ((owner.id,), ())


def test_a_move_home_is_compare_and_set_on_the_pods(submit, quota, other_quota, monkeypatch):
    filler, acc = borrow_while_full(submit, quota, workers=2)
    finish_pods(filler)

    def meanwhile(decided):  # one worker exits between plan() and the writes
        assert [(m.job_id, m.pods) for m in decided.charges_home] == [(acc.id, 2)]
        Pod.objects.filter(job=acc, rank=1).update(status=PodStatus.FAILED)

    real_plan = after_plan(monkeypatch, meanwhile)
    assert run_cycle().charged_home == ()
    # All or nothing: the live worker's charge is not moved either.
    assert set(acc.pods.values_list("charged_quota_id", "in_quota")) == {(other_quota.id, False)}
    monkeypatch.setattr(cycle, "plan", real_plan)
    assert run_cycle().charged_home == (acc.id,)  # the next cycle decides again
    assert acc.pods.get(rank=0).charged_quota_id == quota.id
