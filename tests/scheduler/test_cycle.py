"""run_cycle on the database: what it writes, what it reads, how many queries it takes."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import jobs.scheduler.cycle as cycle_module
from cluster.models import GpuDevice, NodeState
from jobs.actions.stop import request_stop
from jobs.actions.transitions import transition
from jobs.models import Job, JobEvent, Pod
from jobs.scheduler.cycle import load_snapshot, run_cycle
from policy.statuses import ACTIVE_POD_STATUSES, Actor, JobStatus, PodStatus
from protocol import limits
from quotas.models import Quota
from tests.conftest import make_node
from tests.scheduler.conftest import finish_pods, live_gpus


def status_events(job: Job) -> list[tuple[str, str, str]]:
    return list(
        JobEvent.objects.filter(job=job)
        .exclude(from_status="")
        .values_list("from_status", "to_status", "actor")
    )


def test_admission_creates_pods_status_and_event(submit, node, quota):
    job = submit(workers=2, gpus=4, cpus_per_worker=8, memory_gb_per_worker=64)
    result = run_cycle()
    job.refresh_from_db()
    assert result.admitted == (job.id,)
    assert result.pods_created == 2
    assert job.status == JobStatus.STARTING
    assert job.status_reason == "placed 2 workers on node-0 (GPUs 0-7)"
    assert job.queue_position is None
    pods = list(job.pods.order_by("rank"))
    assert [(p.rank, p.node_id, p.gpu_indices) for p in pods] == [
        (0, node.id, [0, 1, 2, 3]),
        (1, node.id, [4, 5, 6, 7]),
    ]
    for pod in pods:
        assert (pod.status, pod.attempt, pod.gpus, pod.cpus, pod.memory_gb) == (
            PodStatus.STARTING,
            job.attempt,
            4,
            8,
            64,
        )
        assert (pod.charged_quota_id, pod.in_quota) == (quota.id, True)
    assert status_events(job) == [("Pending", "Starting", "scheduler")]


def test_waiting_job_goes_inqueue_once_then_only_its_reason_changes(submit, node):
    big = submit(name="big", gpus=8)
    run_cycle()
    waiting = submit(name="waiting", gpus=8)
    result = run_cycle()
    waiting.refresh_from_db()
    assert result.newly_queued == (waiting.id,)
    assert waiting.status == JobStatus.INQUEUE
    assert waiting.status_reason == "no node has 8 free H200 GPUs; all H200 GPUs are in use"
    assert waiting.queue_position == 1
    assert status_events(waiting) == [("Pending", "Inqueue", "scheduler")]

    # Nothing changed: no write, no event.
    assert run_cycle().reasons_updated == 0
    # A higher-priority job moves it to position 2: the row changes, the timeline does not.
    submit(name="urgent", gpus=8, priority=9)
    result = run_cycle()
    waiting.refresh_from_db()
    assert (result.reasons_updated, waiting.queue_position) == (1, 2)
    assert status_events(waiting) == [("Pending", "Inqueue", "scheduler")]
    assert big.pods.count() == 1


def test_quota_reason_counts_live_pods(submit, node, quota):
    make_node("node-1")
    Quota.objects.filter(pk=quota.pk).update(gpus=10)
    submit(name="first", gpus=8)
    run_cycle()
    second = submit(name="second", gpus=4)
    run_cycle()
    second.refresh_from_db()
    assert second.status_reason == "quota team-a: 8/10 GPUs in use, job needs 4"


def test_stopped_job_is_not_admitted(submit, node, researcher):
    job = submit(gpus=1)
    request_stop(job, user=researcher)
    result = run_cycle()
    job.refresh_from_db()
    assert result.admitted == ()
    assert job.status == JobStatus.STOPPED
    assert not job.pods.exists()


def test_job_stopped_between_snapshot_and_apply_loses_and_gets_no_pods(
    submit, node, researcher, monkeypatch
):
    job = submit(gpus=4)
    real_plan = cycle_module.plan

    def plan_then_user_stops(snapshot, now, *options):
        decided = real_plan(snapshot, now, *options)
        assert decided.admissions  # the scheduler decided to admit it …
        request_stop(Job.objects.get(pk=job.pk), user=researcher)  # … and the user won
        return decided

    monkeypatch.setattr(cycle_module, "plan", plan_then_user_stops)
    result = run_cycle()
    job.refresh_from_db()
    assert (result.admitted, result.conflicts, result.pods_created) == ((), (job.id,), 0)
    assert job.status == JobStatus.STOPPED
    assert not Pod.objects.exists()
    assert status_events(job) == [("Pending", "Stopped", "user")]


def test_gpus_of_a_finished_job_stay_busy_until_its_workers_exit(submit, node):
    old = submit(name="old", gpus=8)
    run_cycle()
    old.refresh_from_db()
    # The job ended (e.g. a failed peer) but its worker is still shutting down.
    transition(old, JobStatus.FAILED, reason="worker 1 exited 1", actor=Actor.AGENT)
    new = submit(name="new", gpus=2)
    run_cycle()
    new.refresh_from_db()
    assert new.status == JobStatus.INQUEUE
    assert new.status_reason == "no node has 2 free H200 GPUs; all H200 GPUs are in use"
    finish_pods(old, PodStatus.STOPPED)
    run_cycle()
    new.refresh_from_db()
    assert new.status == JobStatus.STARTING
    assert live_gpus(node) == [0, 1]


def test_unhealthy_gpus_are_not_used(submit, node):
    GpuDevice.objects.filter(node=node, index__in=[0, 5]).update(healthy=False)
    big = submit(name="big", gpus=8)
    small = submit(name="small", gpus=2)
    run_cycle()
    big.refresh_from_db()
    assert big.status_reason == "no node has 8 free H200 GPUs; largest free block is 4"
    assert list(small.pods.values_list("gpu_indices", flat=True)) == [[1, 2]]


@pytest.mark.parametrize(
    ("change", "word"),
    [({"cordoned": True}, "cordoned"), ({"state": NodeState.NOT_READY}, "NotReady")],
)
def test_cordoned_or_not_ready_node_gets_no_work(submit, node, change, word):
    type(node).objects.filter(pk=node.pk).update(**change)
    job = submit(gpus=1)
    run_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.INQUEUE
    assert job.status_reason == f"no schedulable Lingjun H200 node (1 {word})"


def test_cpus_and_memory_of_live_pods_are_taken(submit, quota):
    node = make_node("node-0", cpus=32, memory_gb=256)
    submit(name="first", gpus=1, cpus_per_worker=24, memory_gb_per_worker=64)
    run_cycle()
    second = submit(name="second", gpus=1, cpus_per_worker=16, memory_gb_per_worker=64)
    run_cycle()
    second.refresh_from_db()
    assert second.status_reason == "no node has 1 H200 GPU, 16 CPUs and 64 GB memory free"
    assert live_gpus(node) == [0]


def test_restart_attempt_waits_for_the_old_workers(submit, node):
    job = submit(gpus=2)
    run_cycle()
    job.refresh_from_db()
    transition(job, JobStatus.PENDING, reason="restart 1/3", actor=Actor.MONITOR, attempt=2)
    run_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.INQUEUE
    assert job.status_reason == "waiting for 1 worker of the previous attempt to exit"
    finish_pods(job, PodStatus.STOPPED)
    run_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING
    assert list(job.pods.filter(attempt=2).values_list("gpu_indices", flat=True)) == [[0, 1]]


def test_snapshot_takes_eight_queries(submit, node, django_assert_num_queries):
    for i in range(5):
        submit(name=f"j{i}", gpus=1)
    # pods, unhealthy GPUs, nodes, quotas, pods preempted in the last hour (the per-hour cap
    # and the re-borrow cool-down), waiting jobs, placed jobs, their checkpoints. On
    # PostgreSQL the waiting jobs are two reads: their ids and row versions, then the rows
    # this process has not decoded at that version (jobs.scheduler.waiting)…
    postgres = connection.vendor == "postgresql"
    with django_assert_num_queries(8):
        snapshot, rows = load_snapshot()  # a page's or the forecast's read: rows whole
    assert (len(snapshot.jobs), len(snapshot.nodes), len(rows)) == (5, 1, 5)
    assert snapshot.nodes[0].free_gpu_indices == tuple(range(8))
    with django_assert_num_queries(9 if postgres else 8):
        load_snapshot(incremental=True)  # the cycle's
    # …so a second snapshot of the same queue reads the versions only.
    with django_assert_num_queries(8) as queries:
        again, _ = load_snapshot(incremental=True)
    assert again.jobs == snapshot.jobs
    assert not [q for q in queries.captured_queries if "status_reason" in q["sql"]] or not postgres


def _cycle_queries(submit, waiting_jobs: int, first_ctx, second_ctx) -> tuple[int, int]:
    """`waiting_jobs` + 1 submitted at once: one cycle admits one and queues the rest; the
    runner finishes; the next cycle admits the head of the queue and moves the rest up."""
    Pod.objects.all().delete()
    Job.objects.all().delete()
    runner = submit(name="runner", gpus=8)
    for i in range(waiting_jobs):
        submit(name=f"w{i}", gpus=8)
    with first_ctx as first:
        result = run_cycle()
    assert (result.admitted, len(result.newly_queued)) == ((runner.id,), waiting_jobs)
    finish_pods(runner)
    with second_ctx as second:
        result = run_cycle()
    assert len(result.admitted) == 1
    # Everyone behind moved up one; the head of the queue is written at once (the rest
    # within QUEUE_REFRESH_S: test_deep_queue_positions_are_refreshed_at_most_every_interval).
    assert result.reasons_updated == min(waiting_jobs - 1, limits.QUEUE_EXACT_POSITIONS)
    return len(first), len(second)


def test_cycle_query_count_does_not_grow_with_the_queue(submit, node, django_assert_num_queries):
    first, second = _cycle_queries(
        submit, 3, CaptureQueriesContext(connection), CaptureQueriesContext(connection)
    )
    # The cycle's savepoint and its release (the test runs in a transaction), 8 reads, one
    # SELECT … FOR UPDATE, one UPDATE of statuses, one INSERT of events, the placed nodes'
    # GPU UUIDs and one INSERT of pods, the rendezvous (the placed nodes' addresses, the
    # ports held, one UPDATE: jobs.actions.rendezvous), one UPDATE of queue reasons; plus on
    # PostgreSQL the advisory lock and the waiting jobs' second read (their versions, then
    # the rows this process has not decoded at that version: jobs.scheduler.waiting), and
    # in the second cycle the placed job the first one started, read again at its new
    # version (jobs.scheduler.running).
    assert first <= 21
    assert second <= 22
    _cycle_queries(submit, 40, django_assert_num_queries(first), django_assert_num_queries(second))


def test_deep_queue_positions_are_refreshed_at_most_every_interval(submit, node):
    from datetime import timedelta

    from django.utils import timezone

    head = limits.QUEUE_EXACT_POSITIONS
    runner = submit(name="runner", gpus=8)
    queued = [submit(name=f"w{i}", gpus=8) for i in range(head + 5)]
    start = timezone.now()
    run_cycle(start)
    finish_pods(runner)
    # w0 starts; the 24 behind it move up one. The first `head` are written at once…
    result = run_cycle(start + timedelta(seconds=1))
    assert result.admitted == (queued[0].id,)
    assert result.reasons_updated == head
    positions = dict(
        Job.objects.filter(status=JobStatus.INQUEUE).values_list("id", "queue_position")
    )
    assert [positions[j.id] for j in queued[1 : head + 1]] == list(range(1, head + 1))
    # …the 4 behind keep their old positions (one too deep) for a while…
    assert [positions[j.id] for j in queued[head + 1 :]] == list(range(head + 2, head + 6))
    assert run_cycle(start + timedelta(seconds=2)).reasons_updated == 0
    # …and are written once QUEUE_REFRESH_S has passed since their last write.
    later = start + timedelta(seconds=limits.QUEUE_REFRESH_S + 0.5)
    assert run_cycle(later).reasons_updated == 4
    positions = dict(
        Job.objects.filter(status=JobStatus.INQUEUE).values_list("id", "queue_position")
    )
    assert [positions[j.id] for j in queued[1:]] == list(range(1, head + 5))
    assert run_cycle(later + timedelta(seconds=30)).reasons_updated == 0


def test_submit_and_finish_trigger_a_cycle(
    submit, node, django_capture_on_commit_callbacks, settings
):
    from jobs.actions.workers import apply_worker_state

    settings.CONSOLE_LOOPS = "eager"  # triggers run the cycle right after commit

    with django_capture_on_commit_callbacks(execute=True):
        first = submit(name="first", gpus=8)
    first.refresh_from_db()
    assert first.status == JobStatus.STARTING  # submit → on_commit → cycle
    with django_capture_on_commit_callbacks(execute=True):
        second = submit(name="second", gpus=8)
    second.refresh_from_db()
    assert second.status == JobStatus.INQUEUE
    with django_capture_on_commit_callbacks(execute=True):
        apply_worker_state(first.pods.get(), running=False, exit_code=0)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == JobStatus.COMPLETED
    assert second.status == JobStatus.STARTING  # finish → on_commit → cycle


@pytest.mark.parametrize("pod_status", list(PodStatus))
def test_only_live_workers_hold_gpus(submit, node, pod_status):
    holder = submit(name="holder", gpus=8)
    run_cycle()
    holder.pods.update(status=pod_status)
    snapshot, _ = load_snapshot()
    live = pod_status in ACTIVE_POD_STATUSES  # Starting, Running, Unknown
    assert snapshot.nodes[0].free_gpu_indices == (() if live else tuple(range(8)))
    assert snapshot.quotas[0].used_gpus == (8 if live else 0)


def test_queue_refresh_does_not_overwrite_a_job_stopped_meanwhile(
    submit, node, researcher, monkeypatch
):
    submit(name="runner", gpus=8)
    run_cycle()
    first = submit(name="first", gpus=8)
    second = submit(name="second", gpus=8)
    run_cycle()
    real_plan = cycle_module.plan

    def plan_then_user_stops(snapshot, now, *options):
        decided = real_plan(snapshot, now, *options)
        request_stop(Job.objects.get(pk=second.pk), user=researcher)
        return decided

    # An urgent job jumps the queue: every waiting job's position changes …
    submit(name="urgent", gpus=8, priority=9)
    monkeypatch.setattr(cycle_module, "plan", plan_then_user_stops)
    result = run_cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    # … but the job stopped between snapshot and write keeps what the stop wrote.
    assert result.reasons_updated == 1
    assert (first.status, first.queue_position) == (JobStatus.INQUEUE, 2)
    assert (second.status, second.status_reason) == (JobStatus.STOPPED, "stopped by alice")
    assert second.queue_position is None


def test_a_job_whose_evaluation_raises_waits_with_the_reason_and_others_start(
    submit, node, monkeypatch
):
    from tests.scheduler.test_plan_liveness import _place_failing_for

    bad = submit(name="bad", gpus=2)
    good = submit(name="good", gpus=2)
    _place_failing_for(bad.id, monkeypatch)
    result = run_cycle()
    bad.refresh_from_db()
    good.refresh_from_db()
    assert result.admitted == (good.id,)
    assert good.status == JobStatus.STARTING
    assert bad.status == JobStatus.INQUEUE
    assert bad.status_reason.startswith("set aside: the scheduler could not evaluate this job")
