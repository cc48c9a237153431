"""The API docs' "Try it out" runs in the signed-in browser: the console's session
authenticates the API with Django's CSRF check; without a credential it is still a 401."""

import re

from django.middleware.csrf import get_token
from django.test import Client, RequestFactory

from tests.api.conftest import error_of, post


def signed_in(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def csrf_of(client: Client) -> str:
    html = client.get("/api/v1/docs").text
    (token,) = re.findall(r'data-csrf-token="([^"]+)"', html)
    return token


def test_a_signed_in_user_reads_the_api_with_the_session(researcher):
    client = signed_in(researcher)
    response = client.get("/api/v1/me")
    assert response.status_code == 200 and response.json()["username"] == researcher.username


def test_a_write_with_the_session_needs_the_csrf_token(researcher, job):
    client = signed_in(researcher)
    error_of(post(client, f"/api/v1/jobs/{job.pk}/stop"), 403, "permission_denied")
    token = csrf_of(client)
    response = post(client, f"/api/v1/jobs/{job.pk}/stop", X_CSRFTOKEN=token)
    assert response.status_code == 200, response.content


def test_no_credential_is_still_a_401(db, job):
    error_of(
        post(Client(enforce_csrf_checks=True), f"/api/v1/jobs/{job.pk}/stop"),
        401,
        "not_authenticated",
    )
    assert get_token(RequestFactory().get("/"))  # the middleware's tokens still work
