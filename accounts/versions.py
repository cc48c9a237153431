"""Per-process caches of rows read on every request (API tokens, notification rules), kept
correct across processes by a version counter in Redis (docs/processes.md, "Caches").

    value = cache.get(key, load)   # load() reads the database; cached under the version
    bump(name)                     # after a change commits: every process reloads

The version is read before the database, so a row loaded while a change commits is cached
under the old version and reloaded at the next request. A change is seen by every process
from the moment its bump lands (right after its commit): by every request that starts
after it, since a request reads all the versions at once, at its first use of any, and
keeps them until it ends (one round trip instead of one per cache). Without Redis (the embedded
console, SQLite tests) or with Redis unreachable nothing is cached: every request reads
the database, as before.
"""

import logging
import threading
from collections.abc import Callable, Hashable
from functools import cache
from types import EllipsisType
from typing import Any

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

PREFIX = "console:version:"
MAX_ENTRIES = 10_000  # per cache; cleared whole when full (a cache, not a store)


@cache
def client_for(url: str):
    """One Redis client per URL and process."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


def _redis():
    url = settings.VERSION_STORE_URL
    return client_for(url) if url else None


_NAMES: set[str] = set()  # of every VersionedCache: read together, once per request
_request = threading.local()  # .versions: {name: version} of the request being served
UNTRUSTED: dict[str, bytes | None] = {}  # a request that found the store unreachable


def begin_request(**kwargs: Any) -> None:
    """A request starts (signal request_started): its versions are read at their first use,
    all of them in one round trip, and hold until it ends."""
    _request.versions = None
    _request.serving = True


def end_request(**kwargs: Any) -> None:
    _request.serving = False
    _request.versions = None


def _read_all(client) -> dict[str, bytes | None]:
    import redis

    names = sorted(_NAMES)
    try:
        values = client.mget([PREFIX + name for name in names])
    except redis.RedisError:
        log.warning("version store unreachable; reading %s from the database", ", ".join(names))
        return UNTRUSTED
    return {name: value or b"0" for name, value in zip(names, values, strict=True)}


def current(name: str) -> bytes | None:
    """The shared version of `name`, or None when there is no shared store to trust. In a
    request, every cache's version is read at the first call (before any of their rows)
    and reused until the request ends; elsewhere each call reads it."""
    client = _redis()
    if client is None:
        return None
    if getattr(_request, "serving", False) and name in _NAMES:
        if _request.versions is None:
            _request.versions = _read_all(client)
        if _request.versions is UNTRUSTED:
            return None
        if name in _request.versions:
            return _request.versions[name]
    import redis

    try:
        return client.get(PREFIX + name) or b"0"
    except redis.RedisError:
        log.warning("version store unreachable; reading %s from the database", name)
        return None


def _incr(name: str) -> None:
    client = _redis()
    if client is None:
        return
    import redis

    try:
        client.incr(PREFIX + name)
    except redis.RedisError:
        # Readers cannot tell: they would keep a stale entry. Stop trusting the cache
        # until the store answers again.
        log.error("version store unreachable: %s not bumped", name)
        raise


def bump(name: str) -> None:
    """Every process's cache of `name` is stale once the surrounding transaction commits."""
    transaction.on_commit(lambda: _incr(name), robust=True)


class VersionedCache[T]:
    def __init__(self, name: str) -> None:
        self.name = name
        _NAMES.add(name)
        self._entries: dict[Hashable, tuple[bytes, T]] = {}
        self._lock = threading.Lock()

    def version(self) -> bytes | None:
        """The shared version now (read it before the rows it covers), or None: no cache."""
        return current(self.name)

    def get(
        self, key: Hashable, load: Callable[[], T], version: bytes | EllipsisType | None = ...
    ) -> T:
        """The value of `key`: cached under the shared version, else `load()`. `version`:
        one read by `version()` for several gets of one request (else read here)."""
        if version is ...:
            version = current(self.name)
        if version is None:
            return load()
        hit = self._entries.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = load()
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = (version, value)
        return value

    def note(self, key: Hashable, change: Callable[[T], None]) -> None:
        """Apply `change` to the cached value of `key`, if any (what this process wrote)."""
        hit = self._entries.get(key)
        if hit is not None and hit[1] is not None:
            change(hit[1])

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
