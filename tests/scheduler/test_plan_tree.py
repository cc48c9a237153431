"""plan() over quota trees (docs/quota-tree.md): table tests of each rule on hand-made
snapshots. Flat quotas are covered by every other test of this folder, unchanged."""

from datetime import timedelta

from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot

ONLY = IdleResources.ONLY
NOW = T0 + timedelta(hours=1)


def test_a_guaranteed_job_uses_only_its_own_guarantee():
    org, team = quota(1, name="org", gpus=8), quota(2, name="team", gpus=4, parent_id=1)
    result = plan(snapshot([node(1)], [org, team], [job(10, quota=1, gpus=8)]), NOW)
    assert result.admissions == ()
    assert result.queued[0].reason == "quota org has 4 GPUs in all; job needs 8"


def test_a_limit_names_the_level_that_blocks():
    org = quota(1, name="org", gpus=16, max_gpus=20, used=16)
    dept = quota(2, name="dept-x", gpus=8, parent_id=1)
    lender = quota(3, name="other", gpus=8, tenant=1)
    snap = snapshot([node(1), node(2)], [org, dept, lender], [job(10, quota=2, gpus=8, idle=ONLY)])
    result = plan(snap, NOW)
    assert result.queued[0].reason == "org: limit 20 GPUs, 16 in use, job needs 8"


def test_nearest_first_prefers_a_sibling_over_a_lower_id_elsewhere():
    quotas = [
        quota(1, name="elsewhere", gpus=8),
        quota(2, name="org", gpus=16),
        quota(3, name="x1", gpus=8, parent_id=2, used=8),
        quota(4, name="x2", gpus=8, parent_id=2),
    ]
    snap = snapshot([node(1), node(2)], quotas, [job(10, quota=3, gpus=8, idle=ONLY)])
    [admission] = plan(snap, NOW).admissions
    assert admission.charged_quota_id == 4


def test_a_borrower_is_moved_before_anyone_is_preempted():
    quotas = [
        quota(1, name="shared", gpus=10),
        quota(2, name="vision", gpus=4, parent_id=1, used=2),
        quota(3, name="speech", gpus=4, parent_id=1),
    ]
    quotas[1] = quota(2, name="vision", gpus=4, parent_id=1, used=2, borrowed_gpus=2)
    borrower = running(20, on={1: 2}, quota=2, charged=2)
    snap = snapshot(
        [node(1, free=(2, 3, 4, 5, 6, 7))], quotas, [job(10, quota=2, gpus=4)], [borrower]
    )
    result = plan(snap, NOW, PlanOptions(min_runtime_before_reclaim_s=0))
    assert [a.job_id for a in result.admissions] == [10]
    assert result.preemptions == ()
    [move] = result.charges_home
    assert (move.job_id, move.quota_id, move.in_quota) == (20, 1, False)


def test_fair_share_preemption_is_off_unless_the_tenant_turned_it_on():
    def snap(on: bool):
        quotas = [
            quota(1, name="lender", gpus=8, used=8, borrowed_gpus=8, fair_share_preemption=on),
            quota(2, name="a", gpus=0, fair_share_preemption=on),
            quota(3, name="b", gpus=0, fair_share_preemption=on),
        ]
        held = [running(20 + i, on={1: 2}, quota=2, charged=1) for i in range(4)]
        return snapshot([node(1, free=())], quotas, [job(10, quota=3, gpus=2, idle=ONLY)], held)

    options = PlanOptions(min_runtime_before_reclaim_s=0)
    assert plan(snap(False), NOW, options).preemptions == ()
    [victim] = plan(snap(True), NOW, options).preemptions
    assert victim.for_job_id == 10 and victim.job_id in {20, 21, 22, 23}
