"""Celery tasks of the jobs core. Triggers only (docs/processes.md): no arguments, no state in the
message; each run looks at the whole database, so a lost, duplicated or late message is
harmless. (The node monitor's task is `agents.tasks.node_monitor_tick`: one task per loop,
so an exception in one never skips the other.)"""

from celery import shared_task


@shared_task(name="jobs.schedule_tick", ignore_result=True)
def schedule_tick() -> dict:
    """Run a scheduling cycle (serialised by its own lock, see jobs.scheduler.cycle), or
    leave it to the one already running, which runs again for this trigger
    (jobs.scheduler.coalesce)."""
    from jobs.scheduler.coalesce import run_coalesced

    return run_coalesced()


@shared_task(name="jobs.job_monitor_tick", ignore_result=True)
def job_monitor_tick() -> dict:
    """Run the job monitor: hangs and max runtime (jobs.job_monitor)."""
    from jobs.job_monitor import run_job_monitor

    return run_job_monitor().as_dict()
