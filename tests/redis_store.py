"""The tests' Redis: REDIS_URL, else the local default database 14; a test that needs it
(version stores, coalescing marks) is skipped where none answers."""

import os

import pytest
import redis

URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/14"


def redis_or_skip(url: str = URL, why: str = "") -> str:
    """`url` if a Redis answers there; else the test is skipped."""
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError:
        pytest.skip(f"no Redis at {url}{why}")
    return url
