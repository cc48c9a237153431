"""The database rate-limit store's purge of expired windows (accounts.ratelimit)."""

from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import RateCounter
from accounts.ratelimit import DatabaseStore

pytestmark = pytest.mark.django_db


def test_a_hit_that_draws_the_purge_deletes_expired_windows_only(monkeypatch):
    monkeypatch.setattr("accounts.ratelimit.PURGE_CHANCE", 1.0)  # every hit draws it
    now = datetime.now(UTC)
    RateCounter.objects.create(key="old", count=3, expires_at=now - timedelta(seconds=1))
    RateCounter.objects.create(key="live", count=2, expires_at=now + timedelta(seconds=60))
    assert DatabaseStore().increment("new", 60) == 1
    assert set(RateCounter.objects.values_list("key", flat=True)) == {"live", "new"}
