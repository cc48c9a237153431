"""Celery tasks run the real code path (`.apply()` executes the task locally, no broker)."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.tasks import node_monitor_tick
from cluster.models import Node, NodeState
from console.celery import app
from jobs.models import Job
from jobs.tasks import job_monitor_tick, schedule_tick
from policy.statuses import JobStatus
from tests.redis_store import URL, redis_or_skip


def test_schedule_tick_runs_a_cycle(submit, node):
    job = submit(gpus=2)
    outcome = schedule_tick.apply()
    assert outcome.successful()
    # Round-trip through JSON, as a result backend would carry it.
    summary = json.loads(json.dumps(outcome.get()))
    assert (summary["admitted"], summary["pods_created"]) == ([job.id], 1)
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING


def test_schedule_tick_takes_no_arguments():
    # Triggers only: state travels through the database, never through the message.
    assert schedule_tick.apply(args=(1,)).failed()


def test_job_monitor_tick_runs_the_real_job_monitor(submit, node):
    """A job past its max runtime is terminated by the task, through the real monitor."""
    job = submit(gpus=1, max_runtime_seconds=60)
    schedule_tick.apply()
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=61))
    summary = json.loads(json.dumps(job_monitor_tick.apply().get()))
    assert summary["terminated"] == [job.id]
    job.refresh_from_db()
    assert job.stop_final_status == JobStatus.TERMINATED


def test_node_monitor_tick_runs_the_real_node_monitor(node):
    """A node whose heartbeat deadline passed becomes NotReady through the task."""
    Node.objects.filter(pk=node.pk).update(heartbeat_deadline=timezone.now() - timedelta(seconds=1))
    summary = json.loads(json.dumps(node_monitor_tick.apply().get()))
    assert summary["not_ready"] == [node.name]
    node.refresh_from_db()
    assert node.state == NodeState.NOT_READY


def test_one_monitor_failing_does_not_skip_the_other(node, monkeypatch):
    """Separate tasks: an exception in the job monitor leaves the node monitor's run alone."""
    import jobs.job_monitor

    def broken(*args, **kwargs):
        raise RuntimeError("job monitor bug")

    monkeypatch.setattr(jobs.job_monitor, "check_hangs", broken)
    Node.objects.filter(pk=node.pk).update(heartbeat_deadline=timezone.now() - timedelta(seconds=1))
    assert job_monitor_tick.apply().failed()
    assert node_monitor_tick.apply().get()["not_ready"] == [node.name]


def test_beat_schedules_every_tick(settings):
    schedule = app.conf.beat_schedule
    assert schedule["jobs.schedule_tick"]["schedule"] == settings.SCHEDULER_INTERVAL
    assert schedule["jobs.job_monitor_tick"]["schedule"] == settings.MONITOR_INTERVAL
    assert schedule["agents.node_monitor_tick"]["schedule"] == settings.MONITOR_INTERVAL
    # A tick that waited a whole interval is dropped: the next one does the same work.
    assert schedule["jobs.schedule_tick"]["options"]["expires"] == settings.SCHEDULER_INTERVAL


def test_a_tick_leaves_the_cycle_to_the_running_one_which_runs_again(submit, node, settings):
    """Coalescing (jobs.scheduler.coalesce): while a cycle runs, a tick returns at once and
    leaves its mark; the next cycle takes the mark and admits."""
    import threading

    from jobs.scheduler import coalesce, cycle

    url = redis_or_skip(settings.REDIS_URL or URL)
    if cycle.connection.vendor != "sqlite":
        pytest.skip("a running cycle is simulated by holding SQLite's process lock")
    settings.REDIS_URL = url
    job = submit(gpus=2)
    held, release = threading.Event(), threading.Event()

    def running_cycle() -> None:
        with cycle._process_lock:
            held.set()
            release.wait(10)

    other = threading.Thread(target=running_cycle)
    other.start()
    held.wait(10)
    coalesce.want_cycle()
    assert coalesce.run_coalesced() == {"skipped": "a cycle was running"}
    assert coalesce._redis().exists(coalesce.WANTED)  # left for the running cycle
    release.set()
    other.join()
    summary = coalesce.run_coalesced()
    assert list(summary["admitted"]) == [job.pk]
    assert not coalesce._redis().exists(coalesce.WANTED)


def test_a_task_runs_cycles_while_one_is_wanted_at_most_max_rounds(
    submit, node, settings, monkeypatch
):
    """A task runs again while a cycle is wanted (here: each of its cycles wants another),
    and stops after MAX_ROUNDS in a row: beat sends the next."""
    from jobs.scheduler import coalesce
    from tests.scheduler.seams import after_plan

    settings.REDIS_URL = redis_or_skip(settings.REDIS_URL or URL)
    submit(gpus=2)
    cycles = []
    after_plan(monkeypatch, lambda decided: (cycles.append(decided), coalesce.want_cycle()))
    coalesce.want_cycle()
    assert schedule_tick.apply().successful()
    assert len(cycles) == coalesce.MAX_ROUNDS
    assert coalesce._redis().exists(coalesce.WANTED)  # left for the next task
