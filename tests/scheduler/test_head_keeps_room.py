"""The head of a quota keeps the room it preempts for (docs/scheduling.md, "The head keeps its
room"): jobs looked at after it must not take the free part of what it needs, or it waits a
whole run of theirs (the Kueue baseline's large jobs through the product) or preempts again."""

from policy.scheduler.plan import PlanOptions, plan
from policy.statuses import IdleResources
from tests.scheduler.snaps import T0, job, node, quota, running, snapshot

ACCEPTABLE = IdleResources.ACCEPTABLE
NO_MIN = PlanOptions(min_runtime_before_reclaim_s=0)


def _large_behind_medium(idle: IdleResources, *, two_nodes: bool = False):
    """Quota q (20 GPUs, LowerPriority) runs one medium job (5 GPUs, priority 2); a large job
    (4 x 5 GPUs, priority 3) waits, and behind it three more medium ones. One node of 20 GPUs,
    or the medium one alone on a node of 5 and the free 15 on another."""
    quotas = [quota(1, name="q", gpus=20, used=5, preemption="LowerPriority")]
    held = [running(10, on={1: 5}, quota=1, in_quota=True, priority=2)]
    waiting = [
        job(1, workers=4, gpus=5, priority=3, idle=idle, name="large"),
        *(job(2 + i, gpus=5, priority=2, at=1, idle=idle, name=f"m{i}") for i in range(3)),
    ]
    if two_nodes:
        return snapshot([node(1, gpus=5, free=()), node(2, gpus=15)], quotas, waiting, held)
    return snapshot([node(1, gpus=20, free=tuple(range(5, 20)))], quotas, waiting, held)


def test_an_acceptable_head_keeps_its_room_until_it_preempts():
    decided = plan(_large_behind_medium(ACCEPTABLE), T0, NO_MIN)
    assert decided.admissions == ()  # the medium jobs do not take the large job's 15 GPUs
    assert [(p.job_id, p.for_job_id) for p in decided.preemptions] == [(10, 1)]
    assert decided.decision_for(1).reason.startswith("waiting for 1 preempted job to release")
    assert decided.decision_for(2).reason.startswith("quota q: 20/20 GPUs in use")


def test_an_off_head_books_the_free_room_it_preempts_for():
    """Its victim's node is kept for it (no placement there); the free GPUs on the other node
    are booked to it in its quota, so the medium jobs do not start there either."""
    decided = plan(_large_behind_medium(IdleResources.OFF, two_nodes=True), T0, NO_MIN)
    assert [(p.job_id, p.for_job_id) for p in decided.preemptions] == [(10, 1)]
    assert decided.admissions == ()


def test_without_victims_the_head_keeps_nothing_and_backfill_goes_on():
    """The rest of the quota is held by a job of the head's own priority: nothing the head
    may preempt, so keeping the free GPUs would idle them for as long as that job runs."""
    quotas = [quota(1, name="q", gpus=20, used=15, preemption="LowerPriority")]
    held = [running(10, on={1: 15}, quota=1, in_quota=True, priority=3)]
    waiting = [
        job(1, workers=4, gpus=5, priority=3, idle=ACCEPTABLE, name="large"),
        job(2, gpus=5, priority=2, at=1, idle=ACCEPTABLE, name="medium"),
    ]
    snap = snapshot([node(1, gpus=20, free=tuple(range(15, 20)))], quotas, waiting, held)
    decided = plan(snap, T0, NO_MIN)
    assert [a.job_id for a in decided.admissions] == [2]
    assert decided.preemptions == ()


def test_a_head_that_borrows_gives_its_room_back():
    """The large job borrows a lender's idle GPUs in the idle pass; the room it kept in its
    own quota is not held against anyone afterwards (its usage is as before the keep)."""
    quotas = [
        quota(1, name="q", gpus=20, used=5, preemption="LowerPriority"),
        quota(2, name="lender", gpus=20),
    ]
    held = [running(10, on={1: 5}, quota=1, in_quota=True, priority=2)]
    waiting = [job(1, workers=4, gpus=5, priority=3, idle=ACCEPTABLE, name="large")]
    nodes = [node(1, gpus=20, free=tuple(range(5, 20))), node(2, gpus=20)]
    decided = plan(snapshot(nodes, quotas, waiting, held), T0, NO_MIN)
    [admission] = decided.admissions
    assert admission.job_id == 1 and not admission.in_quota
    assert decided.preemptions == ()


def test_a_second_large_job_behind_the_head_does_not_hide_its_victims():
    """The next large job of the quota is looked at while the head's room is kept, and finds
    no victims against it; that answer must not stand for the head in the idle pass."""
    snap = _large_behind_medium(ACCEPTABLE)
    second = job(9, workers=4, gpus=5, priority=3, at=1, idle=ACCEPTABLE, name="large-2")
    snap = snapshot(snap.nodes, snap.quotas, (*snap.jobs, second), snap.running)
    decided = plan(snap, T0, NO_MIN)
    assert [(p.job_id, p.for_job_id) for p in decided.preemptions] == [(10, 1)]
    assert decided.admissions == ()
