"""Fixtures for the isolation tests (issue 9): an API client, a node, and PostgreSQL-only
failure injection with real triggers (no mocks: the database itself refuses a write)."""

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client

from tests.agents.agentproc import agents  # noqa: F401 - the real agent, as a fixture
from tests.agents.conftest import job_factory  # noqa: F401 - a placed job, as a fixture


def needs_postgres(test):
    """PostgreSQL only (what the old code broke on: NUL in text, varchar limits)."""
    test = pytest.mark.postgres(test)
    return pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL")(test)


@pytest.fixture
def api(api_token) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")


class Trigger:
    """A PostgreSQL trigger that makes the database refuse some writes: a console-side
    failure of one item, for real (as a full disk or a bug in one row's code would)."""

    def __init__(self) -> None:
        self.names: list[tuple[str, str]] = []

    def refuse(self, table: str, when: str, *, events: str = "INSERT OR UPDATE") -> None:
        name = f"isolation_refuse_{len(self.names)}"
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN RAISE EXCEPTION 'refused by test trigger {name}'; END $$"
            )
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {events} ON {table} "
                f"FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION {name}()"
            )
        self.names.append((name, table))

    def drop_all(self) -> None:
        with connection.cursor() as cursor:
            for name, table in self.names:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")
        self.names.clear()


@pytest.fixture
def trigger():
    if not django_settings.IS_POSTGRES:
        pytest.skip("needs PostgreSQL (triggers)")
    made = Trigger()
    yield made
    made.drop_all()
