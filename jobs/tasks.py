"""Celery tasks. Triggers only (DESIGN §2): no arguments, no state in the message; each run
looks at the whole database, so a lost, duplicated or late message is harmless."""

import importlib
import logging

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(name="jobs.schedule_tick", ignore_result=True)
def schedule_tick() -> dict:
    """Run one scheduling cycle (serialised by its own lock, see jobs.scheduler.cycle)."""
    from jobs.scheduler.cycle import run_cycle

    return run_cycle().as_dict()


@shared_task(name="jobs.monitor_tick", ignore_result=True)
def monitor_tick() -> dict:
    """Run the node monitor's cycle (when installed) and the job monitor (hangs, max
    runtime; jobs.monitor)."""
    from jobs.monitor import run_job_monitor

    run_job_monitor()
    try:
        module = importlib.import_module("agents.monitor")
    except ModuleNotFoundError as exc:
        if exc.name != "agents.monitor":
            raise  # a real import error inside the monitor must not be hidden
        log.debug("monitor_tick: agents.monitor is not installed")
        return {"ran": False}
    run = getattr(module, "run_monitor_cycle", None)
    if run is None:
        log.debug("monitor_tick: agents.monitor has no run_monitor_cycle")
        return {"ran": False}
    run()
    return {"ran": True}
