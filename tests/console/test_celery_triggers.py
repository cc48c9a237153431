"""Celery hardening on the real broker (Redis): a trigger carries an `expires` of one interval
and the request id of the request that sent it; an expired trigger never runs (an outage
leaves no backlog); a run is recorded in LoopRun by the worker's signals, with its log lines
carrying the request id. Beat's periodic triggers expire the same way."""

import json
import logging
import os
import time
from datetime import datetime

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

from console.celery import _periodic_triggers, app
from console.models import LoopRun
from console.requestid import RequestIdFilter, reset_request_id, set_request_id
from console.triggers import send_scheduling

pytestmark = [
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs REDIS_URL (Redis)"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def broker(settings):
    settings.CONSOLE_LOOPS = "celery"
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    client.delete("celery")
    yield client
    client.delete("celery")


@pytest.fixture(autouse=True)
def root_log_level():
    """An embedded worker sets the root logger's level (celery's `app.log.setup`); the trace
    logger's "succeeded" line is only written when INFO is enabled as the worker starts, so
    each worker here starts at INFO and the level is put back for the tests that follow."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.fixture(autouse=True)
def worker_sessions_closed():
    """A worker keeps its database connection between tasks (settings.CELERY_DB_REUSE_MAX);
    one embedded in a thread here leaves it open when it stops (a worker process's end
    closes it). Close them, or the test database cannot be flushed or dropped."""
    from celery import signals
    from django.db import connections

    used = []

    def remember(**kwargs) -> None:
        used.append(connections["default"])  # the worker thread's own connection

    signals.task_postrun.connect(remember, weak=False)
    yield
    signals.task_postrun.disconnect(remember)
    for wrapper in {id(w): w for w in used}.values():
        wrapper.inc_thread_sharing()  # closed from this thread, the worker's has ended
        wrapper.close()


def queued_messages(client) -> list[dict]:
    return [json.loads(raw) for raw in client.lrange("celery", 0, -1)]


def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(RequestIdFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_trigger_message_expires_and_carries_the_request_id(broker, settings):
    settings.SCHEDULER_INTERVAL = 7
    token = set_request_id("req-trigger-1")
    try:
        sent_at = time.time()
        send_scheduling()
    finally:
        reset_request_id(token)
    [message] = queued_messages(broker)
    headers = message["headers"]
    assert headers["task"] == "jobs.schedule_tick"
    assert headers["request_id"] == "req-trigger-1"
    expires = datetime.fromisoformat(headers["expires"]).timestamp()
    assert sent_at + 6 <= expires <= time.time() + 7


def test_the_worker_records_the_run_with_the_request_id(broker, settings):
    collect = Collect()
    trace_log = logging.getLogger("celery.app.trace")
    trace_log.addHandler(collect)
    token = set_request_id("req-trigger-2")
    try:
        send_scheduling()
    finally:
        reset_request_id(token)
    try:
        with start_worker(
            app, pool="solo", loglevel="INFO", perform_ping_check=False, shutdown_timeout=30
        ):
            assert wait_for(lambda: LoopRun.objects.filter(name="scheduler", runs__gte=1).exists())
    finally:
        trace_log.removeHandler(collect)
    run = LoopRun.objects.get(name="scheduler")
    assert (run.runs, run.failures, run.last_error) == (1, 0, "")
    assert 0 < run.last_seconds < 30
    succeeded = [r for r in collect.records if "succeeded" in r.getMessage()]
    assert succeeded and succeeded[0].request_id == "req-trigger-2"


def test_an_expired_trigger_never_runs(broker, settings):
    settings.SCHEDULER_INTERVAL = 1
    send_scheduling()
    [message] = queued_messages(broker)
    expires = datetime.fromisoformat(message["headers"]["expires"]).timestamp()
    assert wait_for(lambda: time.time() > expires + 0.2, timeout=10)  # the outage
    with start_worker(
        app, pool="solo", loglevel="INFO", perform_ping_check=False, shutdown_timeout=30
    ):
        assert wait_for(lambda: not broker.llen("celery"))  # taken off the queue…
        # …and dropped: a later trigger runs, the expired one never did.
        settings.SCHEDULER_INTERVAL = 30
        send_scheduling()
        assert wait_for(lambda: LoopRun.objects.filter(name="scheduler").exists())
    assert LoopRun.objects.get(name="scheduler").runs == 1


def test_beat_triggers_expire_after_their_interval(settings):
    settings.SCHEDULER_INTERVAL, settings.MONITOR_INTERVAL = 4, 9
    fresh = Celery("probe", set_as_current=False)
    _periodic_triggers(fresh)
    schedule = fresh.conf.beat_schedule
    assert schedule["jobs.schedule_tick"]["schedule"] == 4
    assert schedule["jobs.schedule_tick"]["options"]["expires"] == 4
    for monitor in ("jobs.job_monitor_tick", "agents.node_monitor_tick"):
        assert schedule[monitor]["schedule"] == 9
        assert schedule[monitor]["options"]["expires"] == 9
    assert app.conf.task_soft_time_limit == settings.CELERY_TASK_SOFT_TIME_LIMIT
    assert app.conf.task_time_limit == settings.CELERY_TASK_TIME_LIMIT
    assert app.conf.worker_max_tasks_per_child == settings.CELERY_WORKER_MAX_TASKS_PER_CHILD


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="PostgreSQL sessions"
)
def test_the_worker_keeps_its_database_session_between_tasks(broker, settings):
    # Celery's Django fix-up closes every connection after each task unless told to reuse
    # them: one new PostgreSQL session (a forked backend, authentication, settings) per
    # scheduling cycle was a tenth of the worker's CPU (docs/processes.md, "Celery").
    from django.db import connection

    def sessions_since(start) -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_start > %s AND pid <> pg_backend_pid()",
                [start],
            )
            return {pid for (pid,) in cursor.fetchall()}

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        started = cursor.fetchone()[0]
    settings.SCHEDULER_INTERVAL = 30
    seen = []
    with start_worker(
        app, pool="solo", loglevel="INFO", perform_ping_check=False, shutdown_timeout=30
    ):
        for runs in range(1, 6):
            send_scheduling()
            assert wait_for(
                lambda runs=runs: LoopRun.objects.filter(name="scheduler", runs__gte=runs).exists()
            )
            seen.append(sessions_since(started))
    # After each of five cycles the worker's one session is still open, and the same one (a
    # session per task would be closed after it: none open, five started in all).
    assert len(seen[0]) == 1 and all(pids == seen[0] for pids in seen), seen
