"""Celery tasks of the jobs core. Triggers only (docs/processes.md): no arguments, no state in the
message; each run looks at the whole database, so a lost, duplicated or late message is
harmless. (The node monitor's task is `agents.tasks.node_monitor_tick`: one task per loop,
so an exception in one never skips the other.)"""

import contextlib

from celery import shared_task

# Coalescing (docs/processes.md): a trigger marks a cycle wanted, then sends the task. A task
# that finds a cycle running returns at once instead of queueing behind the lock for a
# cycle of its own: the running one looks at the mark after it commits (and its lock is
# released) and runs again while it is set. A mark is taken (deleted) once the lock is held
# and before the snapshot is read, so a change committed before it was set is seen by that
# cycle, and a mark set later makes it run again.
WANTED = "console:scheduler:wanted"
MAX_ROUNDS = 20  # back-to-back cycles one task runs at most; beat sends the next


def _redis():
    from django.conf import settings

    if not settings.REDIS_URL:
        return None
    from accounts.versions import client_for

    return client_for(settings.REDIS_URL)


def want_cycle() -> None:
    """Mark a cycle wanted (before sending the task that runs it)."""
    client = _redis()
    if client is not None:
        import redis

        # Unmarked, the task still runs a cycle of its own unless one is running.
        with contextlib.suppress(redis.RedisError):
            client.set(WANTED, 1, ex=60)


def run_coalesced(*, wait: bool = True, rounds: int = MAX_ROUNDS) -> dict:
    """Cycles while one is wanted (see WANTED), at most `rounds`. Without Redis: one cycle,
    waiting for the lock unless `wait` is False. A caller that runs fewer rounds than a
    task would (an agent's report, `admit_now`: one) hands a cycle still wanted to a task
    instead of running it in its request."""
    from jobs.scheduler.cycle import run_cycle

    client = _redis()
    if client is None:
        ran = run_cycle(wait=wait)
        return ran.as_dict() if ran is not None else {"skipped": "a cycle was running"}
    import redis

    result = None
    try:
        for _ in range(rounds):
            ran = run_cycle(wait=False, when_locked=lambda: client.delete(WANTED))
            if ran is None:  # another cycle runs: it sees the mark after its commit
                break
            result = ran
            if not client.exists(WANTED):
                break
        else:
            if rounds < MAX_ROUNDS:
                from jobs.triggers import request_scheduling_now

                request_scheduling_now()  # the trigger whose task found this cycle running
    except redis.RedisError:
        ran = run_cycle(wait=wait)
        return ran.as_dict() if ran is not None else {"skipped": "a cycle was running"}
    return result.as_dict() if result is not None else {"skipped": "a cycle was running"}


@shared_task(name="jobs.schedule_tick", ignore_result=True)
def schedule_tick() -> dict:
    """Run a scheduling cycle (serialised by its own lock, see jobs.scheduler.cycle), or
    leave it to the one already running, which runs again for this trigger."""
    return run_coalesced()


@shared_task(name="jobs.job_monitor_tick", ignore_result=True)
def job_monitor_tick() -> dict:
    """Run the job monitor: hangs and max runtime (jobs.job_monitor)."""
    from jobs.job_monitor import run_job_monitor

    return run_job_monitor().as_dict()
