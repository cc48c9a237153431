"""run_cycle over a quota tree (docs/quota-tree.md): the issue's example, at the database.

vision-h200 (4) holds a 2-GPU Only-Idle job of its own; speech-h200 and shared-h200 have 2
unused GPUs each and 4 GPUs of the node are free. A 4-GPU Off job of vision-h200 starts in
the same cycle: the borrower is re-charged to another lender (compare-and-set on its pods),
nobody is preempted."""

import pytest

from jobs.scheduler.cycle import run_cycle
from policy.statuses import IdleResources
from quotas.models import Quota
from tests.conftest import make_node
from tests.scheduler.seams import after_plan


@pytest.fixture
def tree(tenant, workspace):
    def make(name, gpus, parent=None):
        q = Quota.objects.create(
            tenant=tenant,
            name=name,
            resource_type="Lingjun",
            gpu_type="H200",
            gpus=gpus,
            parent=parent,
        )
        workspace.quotas.add(q)
        return q

    shared = make("shared-h200", 10)
    return shared, make("vision-h200", 4, shared), make("speech-h200", 4, shared)


def test_a_borrower_is_moved_to_another_lender_and_the_off_job_starts_at_once(
    submit, tree, settings
):
    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 300  # a reclaim would have had to wait
    shared, vision, speech = tree
    make_node("node-0", gpus=8)
    speech1 = submit(name="speech1", target=speech, gpus=2)
    idle = submit(name="idle2", target=vision, gpus=2, idle_resources=IdleResources.ONLY)
    assert set(run_cycle().admitted) == {speech1.id, idle.id}
    assert idle.pods.get().charged_quota_id == vision.id

    off = submit(name="vision-off", target=vision, gpus=4)
    result = run_cycle()
    assert (result.admitted, result.preempted, result.charged_home) == (
        (off.id,),
        (),
        (idle.id,),
    )
    pod = idle.pods.get()
    assert (pod.charged_quota_id, pod.in_quota) == (shared.id, False)
    assert (off.pods.get().charged_quota_id, off.pods.get().in_quota) == (vision.id, True)


def test_a_move_away_that_lost_a_race_is_undone_and_decided_again(
    submit, tree, settings, monkeypatch
):
    _shared, vision, speech = tree
    make_node("node-0", gpus=8)
    idle = submit(name="idle2", target=vision, gpus=2, idle_resources=IdleResources.ONLY)
    assert run_cycle().admitted == (idle.id,)
    submit(name="vision-off", target=vision, gpus=4)

    def meanwhile(decided):  # the pod changed charge between plan() and the writes
        [move] = decided.charges_home
        assert (move.job_id, move.in_quota) == (idle.id, False)
        idle.pods.update(charged_quota_id=speech.id)

    after_plan(monkeypatch, meanwhile)
    assert run_cycle().charged_home == ()
    assert idle.pods.get().charged_quota_id == speech.id  # not overwritten
