"""Database backends terminated while real requests run: every answer is the request's own
or a 503 with Retry-After in the stable JSON shape, never a 500 (accounts.dbloss,
console.dbretry, agents.views.agent_endpoint).

A second connection runs `pg_terminate_backend` on every other backend of the test database
in a loop while two clients call the live server: the researcher API's job list (GET) and
the agent API's heartbeat (POST)."""

import threading
from collections import Counter

import psycopg
import pytest
import requests
from django.conf import settings as django_settings
from django.db import connections
from django.test import Client

from accounts.actions import issue_api_token
from jobs.models import Job
from tests.agents.conftest import facts, register
from tests.web.conftest import submit

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL"),
]

REQUESTS_EACH = 120
TERMINATE = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend'"
)


class Killer(threading.Thread):
    """Terminates the database's other backends until stopped; counts them."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        params = connections["default"].get_connection_params()
        params.pop("cursor_factory", None)
        self.db = psycopg.connect(**params, autocommit=True)
        self.stop = threading.Event()
        self.killed = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.killed += self.db.execute(TERMINATE).fetchone()[0]
            self.stop.wait(0.2)  # pacing of the fault, not a wait for a result

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=30)
        self.db.close()


def _calls(session: requests.Session, method: str, url: str, body, results: list) -> None:
    for _ in range(REQUESTS_EACH):
        response = session.request(method, url, json=body, timeout=30)
        results.append(response)


@pytest.fixture
def console_service(transactional_db, researcher, workspace, quota, node):
    """A token, a few jobs to list and a registered node, made before the faults start."""
    for _ in range(3):
        submit(researcher, workspace, quota)
    _, api_token = issue_api_token(researcher)
    _, node_token = register(Client(), "n-kill")
    return api_token, node_token


def test_terminated_backends_never_answer_500(live_server, console_service):
    api_token, node_token = console_service
    api, agent = requests.Session(), requests.Session()
    api.headers["Authorization"] = f"Bearer {api_token}"
    agent.headers["Authorization"] = f"Bearer {node_token}"
    lists: list[requests.Response] = []
    beats: list[requests.Response] = []
    killer = Killer()
    clients = [
        threading.Thread(
            target=_calls, args=(api, "GET", f"{live_server.url}/api/v1/jobs", None, lists)
        ),
        threading.Thread(
            target=_calls,
            args=(
                agent,
                "POST",
                f"{live_server.url}/api/v1/agent/heartbeat/",
                {"facts": facts(), "workers": []},
                beats,
            ),
        ),
    ]
    killer.start()
    try:
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=300)
    finally:
        killer.finish()
        connections.close_all()  # the test's own connection was terminated too

    statuses = Counter(
        (kind, r.status_code) for kind, rs in (("list", lists), ("beat", beats)) for r in rs
    )
    print(f"backends terminated: {killer.killed}; answers: {dict(statuses)}")
    assert len(lists) == len(beats) == REQUESTS_EACH
    assert killer.killed > 0
    for response in lists + beats:
        assert response.status_code in (200, 503), (response.status_code, response.text[:300])
        if response.status_code == 503:
            assert response.headers["Retry-After"] == "1"
            assert response.json()["error"]["code"] == "database_unavailable"
    assert statuses[("list", 200)] + statuses[("beat", 200)] > 0  # served between kills
    assert Job.objects.count() == 3  # the data is whole
