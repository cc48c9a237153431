"""run_cycle: pooled lenders (each pod its own charge) and Acceptable moving its charge home."""

import pytest

from jobs.scheduler.cycle import load_snapshot, run_cycle
from jobs.statuses import IdleResources
from quotas.models import Quota
from tests.conftest import make_node
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
