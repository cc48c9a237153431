"""Rate limits: per API token (429 + Retry-After), bad tokens per address, sign-ins per
user and address; on the database store and, when REDIS_URL is set, on Redis."""

import os

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from accounts import ratelimit
from audit.models import AuditEntry
from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db

STORES = ["database"] + (["redis"] if os.environ.get("REDIS_URL") else [])


@pytest.fixture(params=STORES)
def store(request, settings):
    settings.RATE_LIMIT_STORE = request.param
    if request.param == "redis":
        settings.REDIS_URL = os.environ["REDIS_URL"]
    return request.param


def test_fixed_window_counts_and_resets(store):
    limit = ratelimit.Limit(3, 60)
    t = 1_000_040.0  # 20 s into a window (windows start at multiples of 60)
    verdicts = [ratelimit.hit("s", "who", limit, now=t) for _ in range(4)]
    assert [v.allowed for v in verdicts] == [True, True, True, False]
    assert verdicts[-1].retry_after == 40
    assert ratelimit.peek("s", "who", limit, now=t).allowed is False
    assert ratelimit.hit("s", "other", limit, now=t).allowed is True
    assert ratelimit.hit("s", "who", limit, now=t + 40).allowed is True  # the next window
    ratelimit.reset("s", "who", limit, now=t + 40)
    assert ratelimit.peek("s", "who", limit, now=t + 40).count == 0


def test_a_token_over_its_limit_gets_429_with_retry_after(store, settings, api, job):
    settings.API_RATE_LIMIT = "3/60"
    with time_machine.travel(timezone.now(), tick=False):
        for _ in range(3):
            assert api.get("/api/v1/jobs").status_code == 200
        response = api.get("/api/v1/jobs")
    error = error_of(response, 429, "rate_limited")
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "3 per 60s" in error["message"]


def test_the_limit_is_per_token(store, settings, api, colleague, job):
    from tests.api.conftest import client_for

    settings.API_RATE_LIMIT = "1/60"
    with time_machine.travel(timezone.now(), tick=False):
        assert api.get("/api/v1/jobs").status_code == 200
        assert api.get("/api/v1/jobs").status_code == 429
        assert client_for(colleague).get("/api/v1/jobs").status_code == 200


def test_bad_tokens_are_limited_per_address_and_audited(store, settings, client, job):
    settings.API_AUTH_FAILURES_PER_ADDRESS = "2/60"
    bad = Client(HTTP_AUTHORIZATION="Bearer gqc_deadbeef_nope")
    with time_machine.travel(timezone.now(), tick=False):
        error_of(bad.get("/api/v1/jobs"), 401, "not_authenticated")
        error_of(bad.get("/api/v1/jobs"), 401, "not_authenticated")
        response = bad.get("/api/v1/jobs")
    error_of(response, 429, "rate_limited")
    assert response["Retry-After"]
    denied = AuditEntry.objects.filter(action="access.denied")
    assert denied.count() == 2
    assert denied.first().detail["status"] == 401 and denied.first().source_address == "127.0.0.1"
    # Without credentials there is nothing to guess: a plain 401, not counted.
    error_of(client.get("/api/v1/jobs"), 401, "not_authenticated")


def test_sign_ins_are_limited_per_user(store, settings, client, researcher):
    settings.LOGIN_FAILURES_PER_USER = "3/300"
    with time_machine.travel(timezone.now(), tick=False):
        for _ in range(3):
            response = client.post("/login/", {"username": "alice", "password": "wrong"})
            assert response.status_code == 200
        refused = client.post("/login/", {"username": "alice", "password": "correct-horse-battery"})
        assert refused.status_code == 429
        assert "Too many failed sign-ins" in refused.text
        assert not client.session.get("_auth_user_id")
        # Another account from the same address is not affected (its own counter).
    failed = AuditEntry.objects.filter(action="login.failed")
    assert failed.count() == 4 and failed.last().actor_name == "alice"
    assert failed.filter(detail__rate_limited=True).count() == 1


def test_sign_ins_are_limited_per_address_in_the_admin_too(store, settings, client, researcher):
    settings.LOGIN_FAILURES_PER_ADDRESS = "2/300"
    with time_machine.travel(timezone.now(), tick=False):
        for name in ("x1", "x2"):
            client.post("/admin/login/", {"username": name, "password": "nope"})
        response = client.post("/admin/login/", {"username": "alice", "password": "nope"})
    assert "Too many failed sign-ins" in response.text


def test_a_good_sign_in_clears_the_users_failures(store, settings, client, researcher):
    settings.LOGIN_FAILURES_PER_USER = "3/300"
    with time_machine.travel(timezone.now(), tick=False):
        for _ in range(2):
            client.post("/login/", {"username": "alice", "password": "wrong"})
        ok = client.post("/login/", {"username": "alice", "password": "correct-horse-battery"})
        assert ok.status_code == 302
        client.logout()
        for _ in range(2):
            client.post("/login/", {"username": "alice", "password": "wrong"})
        assert (
            client.post(
                "/login/", {"username": "alice", "password": "correct-horse-battery"}
            ).status_code
            == 302
        )
