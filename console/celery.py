"""Celery app. Tasks are triggers only: the database is the truth (docs/processes.md).

Hardening (settings.CELERY_*): soft and hard time limits on every task, worker processes
recycled after CELERY_WORKER_MAX_TASKS_PER_CHILD tasks, and an `expires` on every trigger
(beat's and the on-commit ones in console.triggers) equal to its interval: after an outage
the queued copies expire instead of running one after another, since one run does the work
of all of them.

Signals: each task run is timed and recorded in `LoopRun` for /metrics (console.actions),
and its log lines carry the request id of the request that triggered it (or its task id).
"""

import os
import time

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def periodic_triggers(settings) -> list[tuple[str, int]]:
    """(task, seconds) beat sends; each message expires after its own interval."""
    return [
        ("jobs.schedule_tick", settings.SCHEDULER_INTERVAL),
        ("jobs.job_monitor_tick", settings.MONITOR_INTERVAL),
        ("agents.node_monitor_tick", settings.MONITOR_INTERVAL),
        ("notifications.deliver_due", settings.NOTIFY_INTERVAL),
        ("usage.rollup_tick", settings.USAGE_ROLLUP_INTERVAL),
    ]


@app.on_after_configure.connect
def _periodic_triggers(sender: Celery, **kwargs) -> None:
    """Beat is the safety net behind the on-commit triggers (docs/processes.md). A tick that waited
    longer than its interval is dropped: the next one does the same work."""
    from django.conf import settings

    for task, every in periodic_triggers(settings):
        sender.add_periodic_task(every, sender.signature(task), name=task, expires=every)


# The process that loaded this module: the worker's main process under prefork.
_LOADED_IN = os.getpid()


@signals.worker_process_init.connect
def _freeze_loaded(**kwargs) -> None:
    """A pool process forked from the worker: what the parent loaded (Django, the apps, the
    tasks) stays for the process's life, out of the collector's walks (console.memory).
    Only in a forked process: the solo pool sends this signal in the process that loaded
    the app, which may be anything embedding a worker (a test run's own heap)."""
    if os.getpid() == _LOADED_IN:
        return
    from console.memory import freeze_loaded

    freeze_loaded()


# Task id → (wall-clock start, monotonic start, request-id token). A dict is enough: each
# task id runs in one worker thread or process at a time.
_running: dict[str, tuple] = {}


@signals.task_prerun.connect
def _task_started(task_id: str, task, **kwargs) -> None:
    from django.db import close_old_connections
    from django.utils import timezone

    from console.requestid import set_request_id

    if not getattr(task.request, "is_eager", False):
        # Connections are kept between tasks (settings.CELERY_DB_REUSE_MAX): drop one past
        # CONN_MAX_AGE or broken by an earlier task, as Django does at each request.
        close_old_connections()

    request_id = getattr(task.request, "request_id", None) or f"task-{task_id}"
    _running[task_id] = (timezone.now(), time.monotonic(), set_request_id(request_id))


@signals.task_postrun.connect
def _task_finished(task_id: str, task, retval=None, state: str | None = None, **kwargs) -> None:
    from console.actions import describe_error, loop_name_for_task, record_run
    from console.requestid import reset_request_id

    started = _running.pop(task_id, None)
    if started is None:
        return
    started_at, monotonic_start, token = started
    error = describe_error(retval) if isinstance(retval, BaseException) else None
    seconds = time.monotonic() - monotonic_start
    try:
        record_run(loop_name_for_task(task.name), started_at, seconds, error)
    finally:
        reset_request_id(token)
