"""How the core's triggers travel in this deployment (registered into `jobs.triggers`).

`settings.CONSOLE_LOOPS` picks the transport, read at send time: a Celery task
(production), a wake-up of an in-process loop (the embedded default), or a synchronous call
right after the commit (tests). `jobs.triggers` sends only after the surrounding
transaction commits, so a worker never runs before the data it needs is visible.
"""

from django.conf import settings

from jobs import triggers


def send_scheduling() -> None:
    mode = settings.CONSOLE_LOOPS
    if mode == "celery":
        from console.requestid import current_request_id
        from jobs.tasks import schedule_tick

        # Expires after one interval: a trigger still queued by then is redundant (beat's
        # next tick, or any later cycle, does the same work), so an outage leaves no backlog.
        schedule_tick.apply_async(
            expires=settings.SCHEDULER_INTERVAL,
            headers={"request_id": current_request_id()},
        )
    elif mode == "inprocess":
        from console.loops import wake

        wake("scheduler")
    else:  # eager
        from jobs.scheduler.cycle import run_cycle

        run_cycle()


def install() -> None:
    """Register the transports (called once at start-up, from ConsoleConfig.ready)."""
    triggers.register(triggers.SCHEDULER, send_scheduling)
