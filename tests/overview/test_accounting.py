"""Usage numbers from the scheduler's snapshot (policy.accounting): table tests, no database."""

from datetime import timedelta

from policy.accounting import account
from policy.statuses import IdleResources
from tests.scheduler.snaps import GENERAL, T0, job, node, quota, running, snapshot


def test_quota_split_into_in_quota_idle_own_lent_and_borrowed():
    a = quota(1, name="a", gpus=8, used=6, borrowed_gpus=4)  # 2 in quota + 4 Not in Quota
    b = quota(2, name="b", gpus=8, used=0)
    snap = snapshot(
        nodes=[node(1, free=(6, 7)), node(2)],
        quotas=[a, b],
        running=[
            running(10, on={1: 2}, quota=1, in_quota=True),
            running(11, on={1: 1}, quota=1, charged=1),  # a's own idle job on a
            running(12, on={1: 3}, quota=2, charged=1),  # b borrows 3 of a
        ],
        jobs=[job(20, quota=1, at=5), job(21, quota=1, at=2, idle=IdleResources.ONLY)],
    )
    usage = account(snap).quotas
    assert (usage[1].used, usage[1].in_quota, usage[1].idle_own, usage[1].lent) == (6, 2, 1, 3)
    assert usage[1].borrowed == 0 and usage[2].borrowed == 3
    assert usage[1].free == 2 and usage[2].free == 8
    assert (usage[1].waiting, usage[1].waiting_guaranteed) == (2, 1)
    assert usage[1].oldest_wait == T0 + timedelta(minutes=2)
    # a has jobs waiting for its guarantee while only 2 of 8 run in quota: starved.
    assert usage[1].starved and not usage[2].starved


def test_a_full_quota_is_not_starved():
    snap = snapshot(
        nodes=[node(1)],
        quotas=[quota(1, gpus=4, used=4)],
        running=[running(10, on={1: 4}, in_quota=True)],
        jobs=[job(20, gpus=2)],
    )
    assert not account(snap).quotas[1].starved


def test_pools_count_what_the_scheduler_can_place_on():
    snap = snapshot(
        nodes=[
            node(1, free=(0, 1, 2)),  # 5 busy
            node(2, schedulable=False, why="cordoned"),  # 8 free but not placeable
            node(3, gpus=4, gpu_type="A100", resource_type=GENERAL),
        ],
        quotas=[
            quota(1, gpus=10, used=5),
            quota(2, name="gp", gpus=6, gpu_type="A100", resource_type=GENERAL),
        ],
    )
    h200 = account(snap).pool(("Lingjun", "H200"))
    assert (h200.total, h200.in_use, h200.free, h200.unavailable) == (16, 5, 3, 8)
    assert not h200.overcommitted
    a100 = account(snap).pool((GENERAL, "A100"))
    assert (a100.total, a100.free, a100.guaranteed) == (4, 4, 6) and a100.overcommitted


def test_who_borrows_from_whom_and_pooled_idle_per_tenant():
    snap = snapshot(
        nodes=[node(1, free=(3, 4, 5, 6, 7))],
        quotas=[
            quota(1, name="a", gpus=4, used=3, borrowed_gpus=3),
            quota(2, name="b", gpus=4),
            quota(3, name="other-tenant", gpus=4, tenant=2),
            quota(4, name="gp", gpus=4, resource_type=GENERAL),
        ],
        running=[running(12, on={1: 3}, quota=2, charged=1)],
    )
    acc = account(snap)
    assert [(b.job_id, b.borrower_id, b.lender_id, b.gpus) for b in acc.borrows] == [(12, 2, 1, 3)]
    pooled = {(p.tenant_id, p.gpu_type): p for p in acc.pooled_idle}
    assert pooled[(1, "H200")].unused == 1 + 4 and pooled[(1, "H200")].quotas == ("a", "b")
    assert pooled[(2, "H200")].unused == 4
    assert pooled[(1, "H200")].free_on_nodes == 5  # node 1: 8 GPUs, 3 busy
    assert all(p.gpu_type == "H200" for p in acc.pooled_idle)  # General-purpose never pools


def test_a_pooled_idle_job_is_a_borrow_of_each_lender_with_its_own_gpus():
    from dataclasses import replace

    pooled = replace(
        running(10, on={1: 8}, quota=1, charged=2), gpus_by_node=((1, 8), (2, 8)), charges=(2, 3)
    )
    quotas = [
        quota(1, name="a", gpus=0),
        quota(2, name="b", gpus=8, used=8, borrowed_gpus=8),
        quota(3, name="c", gpus=8, used=8, borrowed_gpus=8),
    ]
    acc = account(snapshot(nodes=[node(1, free=()), node(2, free=())], quotas=quotas,
                           running=[pooled]))  # fmt: skip
    assert [(b.lender_id, b.gpus) for b in acc.borrows] == [(2, 8), (3, 8)]
    assert acc.quotas[1].borrowed == 16 and acc.quotas[1].idle_own == 0
