"""The shell's writes: each run of a background loop recorded in `LoopRun` (one row per
loop, updated in place): count, failures, total and last duration, when it last ran. Called
by the Celery signal handlers (console.celery) and by the in-process loops (console.loops),
so the embedded console and production report the same way.

Recording never fails the loop: an error here is logged and forgotten (the loop's own work
is already committed or rolled back by then).
"""

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from console.models import LoopRun

log = logging.getLogger(__name__)

# Celery task name → loop name (console.loops), so a loop has one name whether Celery or a
# thread runs it. Other tasks are recorded under their task name.
TASK_LOOPS = {
    "jobs.schedule_tick": "scheduler",
    "jobs.job_monitor_tick": "job-monitor",
    "agents.node_monitor_tick": "monitor",
    "usage.rollup_tick": "usage",
}


def loop_name_for_task(task_name: str) -> str:
    return TASK_LOOPS.get(task_name, task_name)


def record_run(name: str, started_at: datetime, seconds: float, error: str | None) -> None:
    now = timezone.now()
    failed = int(error is not None)
    changes = {
        "runs": F("runs") + 1,
        "failures": F("failures") + failed,
        "seconds_total": F("seconds_total") + seconds,
        "last_seconds": seconds,
        "last_started_at": started_at,
        "last_finished_at": now,
        "last_error": (error or "")[:300],
    }
    try:
        if LoopRun.objects.filter(name=name).update(**changes):
            return
        try:
            with transaction.atomic():
                LoopRun.objects.create(
                    name=name,
                    runs=1,
                    failures=failed,
                    seconds_total=seconds,
                    last_seconds=seconds,
                    last_started_at=started_at,
                    last_finished_at=now,
                    last_error=(error or "")[:300],
                )
        except IntegrityError:  # another process created it first: add to its row
            LoopRun.objects.filter(name=name).update(**changes)
    except Exception:  # a failed record must never stop a loop
        log.warning("could not record a run of loop %s", name, exc_info=True)


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
