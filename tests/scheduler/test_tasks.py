"""Celery tasks run the real code path (`.apply()` executes the task locally, no broker)."""

import json
import sys
import types

from console.celery import app
from jobs.statuses import JobStatus
from jobs.tasks import monitor_tick, schedule_tick


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


def test_monitor_tick_calls_the_monitor_when_installed(db, monkeypatch):
    calls = []
    fake = types.ModuleType("agents.monitor")
    fake.run_monitor_cycle = lambda: calls.append("ran")
    monkeypatch.setitem(sys.modules, "agents.monitor", fake)
    assert monitor_tick.apply().get() == {"ran": True}
    assert calls == ["ran"]


def test_monitor_tick_without_a_monitor_is_a_no_op(db, monkeypatch):
    monkeypatch.setitem(sys.modules, "agents.monitor", None)  # import fails as if absent
    assert monitor_tick.apply().get() == {"ran": False}


def test_beat_schedules_both_ticks(settings):
    schedule = app.conf.beat_schedule
    assert schedule["jobs.schedule_tick"]["schedule"] == settings.SCHEDULER_INTERVAL
    assert schedule["jobs.monitor_tick"]["schedule"] == settings.MONITOR_INTERVAL
    # A tick that waited a whole interval is dropped: the next one does the same work.
    assert schedule["jobs.schedule_tick"]["options"]["expires"] == settings.SCHEDULER_INTERVAL
