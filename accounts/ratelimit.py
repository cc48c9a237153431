"""Fixed-window rate limits that hold across every web process.

A limit is `count` events per `period` seconds for one (scope, who) pair: an API token, a
client address, a username. Counters live in Redis when `settings.REDIS_URL` is set (INCR +
EXPIRE, one round trip) and in the database otherwise (one atomic upsert, so the embedded
SQLite console and several gunicorn processes on PostgreSQL count the same). A fixed window
lets a burst of up to twice the count straddle a window edge; that is fine for abuse protection and
makes `Retry-After` exact: the seconds until the window ends.
"""

import hashlib
import logging
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from accounts.actions import (
    delete_rate_counters,
    increment_rate_counter,
    purge_expired_rate_counters,
)
from accounts.models import RateCounter

log = logging.getLogger(__name__)

PURGE_CHANCE = 0.01  # one database hit in a hundred also deletes expired windows


@dataclass(frozen=True)
class Limit:
    count: int
    period: int  # seconds

    @classmethod
    def parse(cls, text: str) -> "Limit":
        """ "600/60" → 600 events per 60 seconds (settings are written this way)."""
        try:
            count, period = (int(part) for part in text.split("/", 1))
        except ValueError:
            raise ImproperlyConfigured(f"a rate limit is COUNT/SECONDS, got {text!r}") from None
        if count < 1 or period < 1:
            raise ImproperlyConfigured(f"a rate limit needs COUNT, SECONDS >= 1, got {text!r}")
        return cls(count, period)

    def __str__(self) -> str:
        return f"{self.count} per {self.period}s"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    count: int  # events counted in this window, this one included
    limit: Limit
    retry_after: int  # seconds until the window ends

    @property
    def remaining(self) -> int:
        return max(self.limit.count - self.count, 0)


class Store(Protocol):
    def increment(self, key: str, ttl: int) -> int: ...
    def get(self, key: str) -> int: ...
    def delete(self, keys: list[str]) -> None: ...


class DatabaseStore:
    def increment(self, key: str, ttl: int) -> int:
        now = datetime.now(UTC)
        if random.random() < PURGE_CHANCE:
            purge_expired_rate_counters(now)
        return increment_rate_counter(key, now + timedelta(seconds=ttl))

    def get(self, key: str) -> int:
        row = RateCounter.objects.filter(key=key).values_list("count", flat=True).first()
        return row or 0

    def delete(self, keys: list[str]) -> None:
        delete_rate_counters(keys)


class RedisStore:
    """Fails open: with Redis unreachable a request is let through (and logged) rather
    than every API call failing with it."""

    def __init__(self, url: str) -> None:
        import redis

        self.errors = (redis.RedisError,)
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def increment(self, key: str, ttl: int) -> int:
        try:
            pipe = self.client.pipeline()
            pipe.incr(key)
            pipe.expire(key, ttl, nx=True)
            count, _ = pipe.execute()
        except self.errors:
            log.warning("rate limit store unreachable; letting the request through")
            return 0
        return int(count)

    def get(self, key: str) -> int:
        try:
            value = self.client.get(key)
        except self.errors:
            return 0
        return int(value) if value is not None else 0

    def delete(self, keys: list[str]) -> None:
        if keys:
            try:
                self.client.delete(*keys)
            except self.errors:
                log.warning("rate limit store unreachable; counters not reset")


@cache
def _redis_store(url: str) -> RedisStore:
    return RedisStore(url)


def store() -> Store:
    kind = getattr(settings, "RATE_LIMIT_STORE", "") or (
        "redis" if settings.REDIS_URL else "database"
    )
    if kind == "redis":
        return _redis_store(settings.REDIS_URL)
    return DatabaseStore()


def _key(scope: str, who: str, limit: Limit, window: int) -> str:
    # `who` may be anything a client sent (a username): hashed, the key has a fixed size.
    digest = hashlib.sha256(who.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    prefix = getattr(settings, "RATE_LIMIT_PREFIX", "rl")
    return f"{prefix}:{scope}:{digest}:{limit.period}:{window}"


def _window(limit: Limit, now: float) -> tuple[int, int]:
    window = int(now // limit.period)
    retry_after = max(int((window + 1) * limit.period - now + 0.999), 1)
    return window, retry_after


def hit(scope: str, who: str, limit: Limit, *, now: float | None = None) -> Verdict:
    """Count one event for (scope, who); allowed while the window's count is within the
    limit."""
    window, retry_after = _window(limit, time.time() if now is None else now)
    count = store().increment(_key(scope, who, limit, window), limit.period + 1)
    return Verdict(count <= limit.count, count, limit, retry_after)


def peek(scope: str, who: str, limit: Limit, *, now: float | None = None) -> Verdict:
    """Whether one more event would still be allowed, without counting one."""
    window, retry_after = _window(limit, time.time() if now is None else now)
    count = store().get(_key(scope, who, limit, window))
    return Verdict(count < limit.count, count, limit, retry_after)


def reset(scope: str, who: str, limit: Limit, *, now: float | None = None) -> None:
    window, _ = _window(limit, time.time() if now is None else now)
    store().delete([_key(scope, who, limit, window)])


def setting_limit(name: str) -> Limit:
    """The limit a setting names ("COUNT/SECONDS")."""
    return Limit.parse(getattr(settings, name))
