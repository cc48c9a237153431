"""One scheduling cycle: the imperative shell around `plan()` (docs/scheduling.md).

    lock → load snapshot (`jobs.scheduler.snapshot`, 8 queries) → plan() → apply
    (`jobs.actions.scheduling`), all in ONE transaction.

This is the scheduler package's one writing module: the only one that imports
`jobs.actions` (the rest reads, or runs it: `jobs.scheduler.coalesce`); the row types it
passes along are the scheduler's own (`jobs.scheduler.rows`).

Serialisation: on PostgreSQL `pg_advisory_xact_lock(SCHEDULER_LOCK_KEY)` is the first
statement of the cycle's transaction and is released by its commit, so two cycles (two
Celery workers, beat plus an on-commit trigger) never plan on the same free GPUs: the second
one's snapshot is read after the first one's pods are committed. On SQLite a process-wide
lock keeps threads apart and the IMMEDIATE transaction mode (console.settings) takes the
database write lock at BEGIN, which keeps other processes apart. Under both, a database
constraint refuses two live pods on one GPU (migration `pods_hold_distinct_gpus`).

Races with writers outside the lock (a user's stop, an agent's report) are settled row by
row in `jobs.actions.scheduling.apply_plan`: only jobs still in the status the snapshot saw
move. Capacity is only ever freed outside the lock, so a slightly old snapshot is
conservative.

Queries per cycle do not grow with the number of waiting jobs: 8 reads, one lock, then the
writes (see `apply_plan`). Preemptions (rare) cost a few statements per victim.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from jobs.actions.scheduling import apply_plan
from jobs.scheduler import figures
from jobs.scheduler.gcpause import collector_paused
from jobs.scheduler.rows import CycleResult
from jobs.scheduler.snapshot import load_snapshot
from policy.scheduler.plan import PlanOptions, plan

__all__ = ["SCHEDULER_LOCK_KEY", "load_snapshot", "plan_options", "run_cycle"]

log = logging.getLogger(__name__)

# Any constant works as long as nothing else in the database uses it: "GPUSCHED" in ASCII.
SCHEDULER_LOCK_KEY = 0x4750555343484544
_process_lock = threading.RLock()


@contextmanager
def _serialised(wait: bool = True) -> Iterator[bool]:
    """Hold the scheduler's lock for one transaction; yields False (holding nothing) when
    `wait` is False and another cycle holds it."""
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                if wait:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULER_LOCK_KEY])
                else:
                    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [SCHEDULER_LOCK_KEY])
                    if not cursor.fetchone()[0]:
                        yield False
                        return
            yield True
        return
    lock = _process_lock if connection.vendor == "sqlite" else None
    if lock is not None and not lock.acquire(blocking=wait):
        yield False
        return
    try:
        with transaction.atomic():
            yield True
    finally:
        if lock is not None:
            lock.release()


def run_cycle(
    now: datetime | None = None,
    *,
    wait: bool = True,
    when_locked: Callable[[], object] | None = None,
) -> CycleResult | None:
    """Admit what fits, queue the rest with reasons. Safe to run anywhere, any number of
    times, concurrently: it is level-triggered and serialised.

    `wait=False` (a coalescing task, jobs.scheduler.coalesce): run only if no other cycle
    is running, else return None at once; the running one runs again for it. `when_locked`:
    called once the lock is held, before the snapshot is read (the task takes its mark
    then)."""
    now = now or timezone.now()
    with _serialised(wait) as held:
        if not held:
            return None
        if when_locked is not None:
            when_locked()
        began = time.monotonic()
        with collector_paused():  # jobs.scheduler.gcpause: the collector's walks found nothing
            snapshot, rows = load_snapshot(now, incremental=True)
            decided = plan(snapshot, now, plan_options())
            result = apply_plan(decided, rows, now)
    figures.record(time.monotonic() - began)  # after the commit: never holding the lock
    if result.admitted or result.conflicts:
        log.info(
            "scheduler: admitted %d job(s), %d waiting, %d lost a race (first: %s)",
            len(result.admitted),
            result.waiting,
            len(result.conflicts),
            list(result.admitted[:5]),
        )
    if result.charged_home:
        log.info("scheduler: charge moved home (in quota) for job(s) %s", list(result.charged_home))
    return result


def plan_options() -> PlanOptions:
    """Scheduler knobs from settings (README "Settings"; the others: PlanOptions' defaults)."""
    return PlanOptions(
        min_runtime_before_reclaim_s=settings.SCHEDULER_MIN_RUNTIME_BEFORE_RECLAIM,
        reserve_after_s=settings.SCHEDULER_RESERVE_AFTER,
    )
