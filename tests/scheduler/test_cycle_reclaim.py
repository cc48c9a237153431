"""run_cycle with idle resources: borrowing, reclaim through request_stop, no double booking."""

from jobs.actions.workers import apply_worker_state
from jobs.models import Job, JobEvent, Pod, PodDesired
from jobs.scheduler.cycle import run_cycle
from policy.statuses import IdleResources, JobStatus, PodStatus
from quotas.models import PreemptionPolicy, Quota
from tests.conftest import make_node
from tests.scheduler.conftest import live_gpus


def exit_all(job: Job) -> None:
    """The agent reports every live worker of the job gone (after its SIGTERM)."""
    for pod in Pod.objects.filter(job=job, status__in=["Starting", "Running", "Unknown"]):
        apply_worker_state(pod, running=False, exit_code=143)


def test_by_default_a_borrower_that_just_started_is_protected(submit, quota, other_quota):
    make_node("node-0")
    Quota.objects.filter(pk=other_quota.pk).update(gpus=0)
    borrower = submit(name="b1", target=other_quota, gpus=8, idle_resources=IdleResources.ONLY)
    run_cycle()
    owner = submit(name="a1", gpus=8)
    assert run_cycle().preempted == ()  # min_runtime_before_reclaim defaults to 300 s
    owner.refresh_from_db()
    kept = "kept: borrower of team-b is inside its minimum runtime before reclaim (300 s)"
    assert kept in owner.status_reason
    assert borrower.pods.get().in_quota is False


def test_borrow_then_reclaim_waits_for_the_victim_then_places(submit, quota, other_quota, settings):
    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0  # the reclaim itself is tested here
    n0, n1 = make_node("node-0"), make_node("node-1")
    Quota.objects.filter(pk=other_quota.pk).update(gpus=0)
    borrower = submit(
        name="b1", target=other_quota, workers=2, gpus=8, idle_resources=IdleResources.ONLY
    )
    run_cycle()
    pods = list(borrower.pods.all())
    assert {(p.charged_quota_id, p.in_quota) for p in pods} == {(quota.id, False)}

    owner = submit(name="a1", gpus=8)
    result = run_cycle()
    assert result.preempted == (borrower.id,)
    borrower.refresh_from_db()
    owner.refresh_from_db()
    # The victim keeps its status until its workers exit; they are told to stop.
    assert borrower.status == JobStatus.STARTING
    assert borrower.stop_final_status == JobStatus.PREEMPTED
    assert set(borrower.pods.values_list("desired", "stop_as", "stop_reason")) == {
        (PodDesired.STOP, PodStatus.PREEMPTED, "reclaimed by team-a for job a1")
    }
    assert owner.status == JobStatus.INQUEUE
    assert owner.status_reason == "waiting for 1 preempted job to release their GPUs"

    # Still releasing: the next cycle neither places the owner nor preempts again.
    again = run_cycle()
    assert (again.admitted, again.preempted) == ((), ())
    assert live_gpus(n0) == list(range(8))

    exit_all(borrower)
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.PREEMPTED
    assert set(borrower.pods.values_list("status", flat=True)) == {PodStatus.PREEMPTED}
    assert run_cycle().admitted == (owner.id,)
    owner.refresh_from_db()
    assert owner.status == JobStatus.STARTING
    [pod] = owner.pods.all()
    assert (pod.charged_quota_id, pod.in_quota) == (quota.id, True)
    assert sorted(live_gpus(n0) + live_gpus(n1)) == list(range(8))


def test_acceptable_job_in_quota_is_never_reclaimed(submit, quota, other_quota):
    make_node("node-0")
    Quota.objects.filter(pk=quota.pk).update(gpus=8)
    lander = submit(name="acc", gpus=8, idle_resources=IdleResources.ACCEPTABLE)
    run_cycle()
    assert lander.pods.get().in_quota
    waiting = submit(name="a2", gpus=8)
    result = run_cycle()
    assert result.preempted == ()
    waiting.refresh_from_db()
    assert waiting.status_reason == "quota team-a: 8/8 GPUs in use, job needs 8"


def test_priority_preemption_in_a_lower_priority_quota(submit, quota):
    make_node("node-0")
    Quota.objects.filter(pk=quota.pk).update(gpus=8, preemption=PreemptionPolicy.LOWER_PRIORITY)
    low = submit(name="low", gpus=8, priority=1)
    run_cycle()
    high = submit(name="high", gpus=8, priority=5)
    assert run_cycle().preempted == (low.id,)
    exit_all(low)
    low.refresh_from_db()
    assert low.status == JobStatus.PREEMPTED
    assert JobEvent.objects.filter(
        job=low, reason="stop requested: preempted by higher-priority job high in quota team-a"
    ).exists()
    assert run_cycle().admitted == (high.id,)


def test_a_reclaimed_borrower_keeps_its_history_for_the_cap_and_the_cool_down(
    submit, quota, other_quota, settings
):
    """The cycle derives the per-hour cap's and the cool-down's inputs from the preempted
    pods themselves (no extra table): when the job was preempted, and by which lender."""
    from jobs.scheduler.cycle import load_snapshot

    settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM = 0
    make_node("node-0")
    Quota.objects.filter(pk=other_quota.pk).update(gpus=0)
    borrower = submit(
        name="b1",
        target=other_quota,
        gpus=8,
        idle_resources=IdleResources.ONLY,
        fault_tolerance=True,
    )
    run_cycle()
    owner = submit(name="a1", gpus=8)
    assert run_cycle().preempted == (borrower.id,)
    exit_all(borrower)
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.PENDING  # restarted by fault tolerance
    snapshot, _ = load_snapshot()
    [again] = [j for j in snapshot.jobs if j.id == borrower.id]
    [(lender, when)] = again.reclaimed_by
    assert lender == quota.id and when is not None
    # The owner takes the freed GPUs; the borrower waits without re-borrowing team-a.
    assert run_cycle().admitted == (owner.id,)
    snapshot, _ = load_snapshot()
    [running] = [r for r in snapshot.running if r.id == owner.id]
    assert running.preempted_at == ()
