"""A database backend terminated at one chosen statement of a request, on PostgreSQL: where
Django, the API framework or a middleware would have turned it into a 500 (the session and
user lookup in the middlewares, the API's keyed create, the rate-limit purge in the API's
authentication). A request safe to run twice is answered as if nothing happened; one that
is not is a 503 with Retry-After and `database_unavailable` (accounts.dbloss,
console.dbretry; docs/fault-tolerance.md, "A lost database connection").

The kill is real: an `execute_wrapper` on the request's connection, before the chosen
statement, has a second connection run `pg_terminate_backend` on its backend (and wait
for it to end), once."""

import json
import re
import uuid

import psycopg
import pytest
from django.conf import settings as django_settings
from django.db import connection, connections
from django.test import Client

from jobs.models import Job
from tests.api.conftest import GOOD, client_for

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL"),
]


class KillAt:
    """Terminates the request's backend just before the first statement matching
    `pattern` (once)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = re.compile(pattern, re.IGNORECASE)
        self.killed = 0
        params = connections["default"].get_connection_params()
        params.pop("cursor_factory", None)
        self.side = psycopg.connect(**params, autocommit=True)

    def __call__(self, execute, sql, params, many, context):
        if not self.killed and self.pattern.search(sql):
            pid = context["connection"].connection.info.backend_pid
            self.side.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
            self.killed += 1
        return execute(sql, params, many, context)

    def close(self) -> None:
        self.side.close()


@pytest.fixture
def kill_at(transactional_db):
    made: list[KillAt] = []

    def arm(pattern: str) -> KillAt:
        killer = KillAt(pattern)
        made.append(killer)
        return killer

    yield arm
    for killer in made:
        killer.close()
    connections.close_all()


def _request(killer: KillAt, send):
    with connection.execute_wrapper(killer):
        return send()


def _is_503(response) -> None:
    assert response.status_code == 503, response.content[:300]
    assert response["Retry-After"] == "1"
    assert json.loads(response.content)["error"]["code"] == "database_unavailable"


def test_a_page_whose_session_lookup_loses_the_connection_is_served(kill_at, researcher):
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    killer = kill_at(r'FROM "django_session"')
    response = _request(killer, lambda: client.get("/"))
    assert killer.killed == 1
    assert response.status_code == 200  # run again on a new connection


def test_a_page_whose_user_lookup_loses_the_connection_is_served(kill_at, researcher):
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    killer = kill_at(r'FROM "auth_user"')
    response = _request(killer, lambda: client.get("/jobs/"))
    assert killer.killed == 1 and response.status_code == 200


def test_a_form_post_that_loses_the_connection_is_a_503(kill_at, researcher):
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    killer = kill_at(r'FROM "django_session"')
    response = _request(killer, lambda: client.post("/jobs/new/", {"name": "x"}))
    assert killer.killed == 1
    _is_503(response)  # not safe to run twice: the client is told to retry


def test_a_keyed_create_is_retried_and_makes_one_job(kill_at, researcher, quota, node):
    client = client_for(researcher)
    client.raise_request_exception = False
    killer = kill_at(r'^INSERT INTO "jobs_job"')
    response = _request(
        killer,
        lambda: client.post(
            "/api/v1/jobs",
            json.dumps(GOOD),
            content_type="application/json",
            headers={"Idempotency-Key": uuid.uuid4().hex},
        ),
    )
    assert killer.killed == 1, response.content[:300]
    assert response.status_code == 201, response.content[:300]
    assert Job.objects.count() == 1


def test_a_create_without_a_key_is_a_503_and_makes_nothing(kill_at, researcher, quota, node):
    client = client_for(researcher)
    client.raise_request_exception = False
    killer = kill_at(r'^INSERT INTO "jobs_job"')
    response = _request(
        killer,
        lambda: client.post("/api/v1/jobs", json.dumps(GOOD), content_type="application/json"),
    )
    assert killer.killed == 1
    _is_503(response)
    assert Job.objects.count() == 0


def test_the_rate_limit_purge_losing_the_connection_is_retried(
    kill_at, researcher, settings, monkeypatch
):
    settings.RATE_LIMIT_STORE = "database"
    monkeypatch.setattr("accounts.ratelimit.PURGE_CHANCE", 1.0)
    client = client_for(researcher)
    client.raise_request_exception = False
    killer = kill_at(r'^DELETE FROM "accounts_ratecounter"')
    response = _request(killer, lambda: client.get("/api/v1/jobs"))
    assert killer.killed == 1
    assert response.status_code == 200, response.content[:300]
