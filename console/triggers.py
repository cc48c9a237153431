"""Triggers for background loops. Messages carry no state: the database is the truth.

Every trigger is sent after the surrounding transaction commits (`transaction.on_commit`),
so a worker never runs before the data it needs is visible. How it is delivered depends on
`settings.CONSOLE_LOOPS`: a Celery task, a wake-up of an in-process loop, or (tests) a
synchronous call.
"""

import logging

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)


def request_scheduling() -> None:
    transaction.on_commit(_send_scheduling, robust=True)


def _send_scheduling() -> None:
    mode = settings.CONSOLE_LOOPS
    if mode == "celery":
        from jobs.tasks import schedule_tick

        schedule_tick.delay()
    elif mode == "inprocess":
        from console.loops import wake

        wake("scheduler")
    else:  # eager
        from jobs.scheduler.cycle import run_cycle

        run_cycle()
