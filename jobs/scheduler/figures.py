"""Each scheduling cycle's own figures, counted in Redis where cycles run in Celery workers
(README, "Benchmarks"): how many, their seconds, and the longest since a reset.

The scheduler's `LoopRun` row counts *runs of the loop*: in the embedded default a run is
one cycle, but a Celery task runs up to `coalesce.MAX_ROUNDS` coalesced cycles back to back
(and one that finds a cycle running returns at once), so a task's duration is not a
cycle's. The cycle itself adds its seconds here, after its commit, in one Redis call; a
Redis that does not answer loses the figure, never the cycle.
"""

import logging

from django.conf import settings

log = logging.getLogger(__name__)

KEY = "console:scheduler:cycles"
# Counts the cycle and its seconds; keeps the longest.
_RECORD = (
    "redis.call('hincrby', KEYS[1], 'cycles', 1) "
    "redis.call('hincrbyfloat', KEYS[1], 'seconds', ARGV[1]) "
    "if tonumber(ARGV[1]) > tonumber(redis.call('hget', KEYS[1], 'longest') or '0') then "
    "redis.call('hset', KEYS[1], 'longest', ARGV[1]) end"
)


def _client(url: str):
    from accounts.versions import client_for

    return client_for(url)


def record(seconds: float) -> None:
    """A cycle ran for `seconds` (from its lock to its commit)."""
    if settings.CONSOLE_LOOPS != "celery" or not settings.REDIS_URL:
        return  # one cycle per run of the loop: its LoopRun is the cycle's
    import redis

    try:
        _client(settings.REDIS_URL).eval(_RECORD, 1, KEY, f"{seconds:.6f}")
    except redis.RedisError as exc:
        log.warning("cannot count a scheduling cycle's figures: %s", exc)


def read(url: str, reset_longest: bool = False) -> dict[str, float]:
    """`cycles`, `seconds` and the `longest` since the last reset (`reset_longest` starts a
    new window) of the cycles counted in the Redis at `url`."""
    client = _client(url)
    found = client.hgetall(KEY)
    if reset_longest:
        client.hset(KEY, "longest", 0)
    return {name.decode(): float(value) for name, value in found.items()}
