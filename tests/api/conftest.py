"""API test helpers: clients with tokens, JSON posts, the error shape."""

import json

import pytest
from django.test import Client

from accounts.actions import issue_api_token
from tests.web.conftest import _fast_passwords, api, job  # noqa: F401 (fixtures)

GOOD = {"quota": "team-a", "image": "busybox", "command": "echo hi"}


def client_for(user) -> Client:
    _, plain = issue_api_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {plain}")


def post(client: Client, path: str, body=None, **headers):
    data = "" if body is None else body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(path, data, content_type="application/json", headers=headers)


def error_of(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message", "field"} <= set(body["error"])
    assert body["error"]["code"] == code, body
    return body["error"]


@pytest.fixture
def admin_user(db):
    from tests.conftest import make_user

    return make_user("root", is_staff=True, is_superuser=True)
