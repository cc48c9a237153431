"""Each cycle's own figures (jobs.scheduler.figures): where Celery tasks run cycles (up to
20 coalesced cycles a task), the cycle counts itself in Redis, so a benchmark reads cycles,
not tasks."""

import uuid

import pytest

from jobs.scheduler import figures
from jobs.scheduler.cycle import run_cycle
from tests.redis_store import URL, redis_or_skip


@pytest.fixture
def key(monkeypatch):
    """A key of this test's own (two suites share one Redis at once)."""
    key = f"test:cycles:{uuid.uuid4().hex}"
    monkeypatch.setattr(figures, "KEY", key)
    return key


def _read(key: str, reset_longest: bool = False) -> dict:
    return {k: round(v, 6) for k, v in figures.read(URL, reset_longest).items()}


def test_cycles_seconds_and_the_longest_since_a_reset(settings, key):
    settings.CONSOLE_LOOPS, settings.REDIS_URL = "celery", redis_or_skip(URL)
    for seconds in (0.2, 0.5, 0.1):
        figures.record(seconds)
    assert _read(key) == {"cycles": 3, "seconds": 0.8, "longest": 0.5}
    _read(key, reset_longest=True)
    figures.record(0.3)
    assert _read(key) == {"cycles": 4, "seconds": 1.1, "longest": 0.3}


@pytest.mark.django_db
def test_every_cycle_counts_itself(settings, key):
    settings.CONSOLE_LOOPS, settings.REDIS_URL = "celery", redis_or_skip(URL)
    for _ in range(3):
        run_cycle()
    found = figures.read(URL)
    assert found["cycles"] == 3 and 0 < found["longest"] <= found["seconds"]


def test_in_process_loops_count_nothing_here(settings, key):
    """There one run of the loop is one cycle: its LoopRun row is the cycle's."""
    settings.CONSOLE_LOOPS, settings.REDIS_URL = "inprocess", ""
    figures.record(0.2)
    assert figures.read(redis_or_skip(URL)) == {}


def test_an_unreachable_redis_loses_the_figure_not_the_cycle(settings, key):
    settings.CONSOLE_LOOPS, settings.REDIS_URL = "celery", "redis://127.0.0.1:1/0"
    figures.record(0.2)  # logged, never raised
