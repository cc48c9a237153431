"""Coalescing scheduling triggers (docs/processes.md): a burst of triggers costs a few cycles,
not one each, and none is lost.

A trigger marks a cycle wanted (`want_cycle`), then sends the task. A task that finds a
cycle running returns at once instead of queueing behind the lock for a cycle of its own:
the running one looks at the mark after it commits (and its lock is released) and runs
again while it is set. A mark is taken (deleted) once the lock is held and before the
snapshot is read, so a change committed before it was set is seen by that cycle, and a mark
set later makes it run again. Without Redis there is no mark: each task runs one cycle,
waiting for the lock.

This module sits on the cycle (`jobs.scheduler.cycle`) and is called by the task
(`jobs.tasks.schedule_tick`) and the trigger's transport (`console.triggers`); nothing
below imports it.
"""

import contextlib

from django.conf import settings

from accounts.versions import client_for
from jobs.scheduler.cycle import run_cycle

WANTED = "console:scheduler:wanted"
MAX_ROUNDS = 20  # back-to-back cycles one task runs at most; beat sends the next
SKIPPED = {"skipped": "a cycle was running"}


def _redis():
    return client_for(settings.REDIS_URL) if settings.REDIS_URL else None


def want_cycle() -> None:
    """Mark a cycle wanted (before sending the task that runs it)."""
    client = _redis()
    if client is not None:
        import redis

        # Unmarked, the task still runs a cycle of its own unless one is running.
        with contextlib.suppress(redis.RedisError):
            client.set(WANTED, 1, ex=60)


def run_coalesced() -> dict:
    """Cycles while one is wanted (see WANTED), at most MAX_ROUNDS; a summary of the last
    one. Without Redis (or with Redis unreachable): one cycle, waiting for the lock."""
    client = _redis()
    if client is None:
        return run_cycle().as_dict()
    import redis

    result = None
    try:
        for _ in range(MAX_ROUNDS):
            ran = run_cycle(wait=False, when_locked=lambda: client.delete(WANTED))
            if ran is None:  # another cycle runs: it sees the mark after its commit
                break
            result = ran
            if not client.exists(WANTED):
                break
    except redis.RedisError:
        return run_cycle().as_dict()
    return result.as_dict() if result is not None else dict(SKIPPED)
