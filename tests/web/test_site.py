"""Login, logout, health check and the researcher's API token page."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from accounts.actions import issue_api_token
from accounts.models import ApiToken
from accounts.tokens import digest_of


def test_login_page_and_login(db, researcher):
    client = Client()
    assert client.get(reverse("login")).status_code == 200
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("home")
    assert client.get(reverse("web:list")).status_code == 200


def test_bad_login_shows_an_error(db, researcher):
    response = Client().post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200 and "didn't match" in response.text


def test_logout_is_a_post(member_client):
    assert member_client.get(reverse("logout")).status_code == 405
    response = member_client.post(reverse("logout"))
    assert response.status_code == 302
    assert member_client.get(reverse("web:list")).status_code == 302


def test_healthz_checks_the_database(client, db):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}
    assert client.post(reverse("healthz")).status_code == 405


def test_token_page_creates_a_token_shown_once(member_client, researcher):
    assert member_client.get(reverse("api-token")).status_code == 200
    response = member_client.post(reverse("api-token"), {"action": "create"})
    # POST-redirect-GET: the POST answers with a redirect, the GET shows the token once.
    assert response.status_code == 302 and response["Location"] == reverse("api-token")
    page = member_client.get(reverse("api-token"))
    assert "no-store" in page["Cache-Control"]
    plain = re.search(r"gqc_[0-9a-f]{8}_[A-Za-z0-9_-]+", page.text).group(0)
    token = ApiToken.objects.get(user=researcher)
    assert token.digest == digest_of(plain)
    # It works for the API; a reload neither shows it again nor rotates it.
    api = Client(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert api.get(reverse("api:jobs")).status_code == 200
    assert plain not in member_client.get(reverse("api-token")).text
    assert ApiToken.objects.filter(user=researcher).count() == 1
    assert api.get(reverse("api:jobs")).status_code == 200


def test_the_new_token_is_never_stored_in_the_session(member_client, researcher):
    from django.contrib.sessions.models import Session

    member_client.post(reverse("api-token"), {"action": "create"})
    plain = re.search(
        r"gqc_[0-9a-f]{8}_[A-Za-z0-9_-]+", member_client.get(reverse("api-token")).text
    )
    for session in Session.objects.all():
        assert plain.group(0) not in str(session.get_decoded())


def test_rotating_asks_for_confirmation_first(member_client, researcher, api_token):
    response = member_client.post(reverse("api-token"), {"action": "create"})
    assert response.status_code == 302 and response["Location"].endswith("?confirm=rotate")
    old = Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert old.get(reverse("api:jobs")).status_code == 200  # nothing rotated yet
    confirm = member_client.get(response["Location"]).text
    assert "Rotate your API token?" in confirm and 'name="confirm" value="yes"' in confirm


def test_rotating_revokes_the_previous_token(member_client, researcher, api_token):
    member_client.post(reverse("api-token"), {"action": "create", "confirm": "yes"})
    assert ApiToken.objects.filter(user=researcher, revoked_at__isnull=True).count() == 1
    old = Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert old.get(reverse("api:jobs")).status_code == 401


def test_revoke_only_own_tokens(member_client, researcher, outsider):
    mine, _ = issue_api_token(researcher)
    theirs, _ = issue_api_token(outsider)
    member_client.post(reverse("api-token"), {"action": "revoke", "token": str(theirs.pk)})
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    member_client.post(reverse("api-token"), {"action": "revoke", "token": str(mine.pk)})
    mine.refresh_from_db()
    assert mine.revoked_at is not None


@pytest.mark.parametrize("data", [{}, {"action": "drop"}, {"action": "revoke", "token": "x"}])
def test_token_page_rejects_bad_posts(member_client, data):
    assert member_client.post(reverse("api-token"), data).status_code == 400
    assert ApiToken.objects.count() == 0


def test_token_page_needs_csrf(researcher):
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    assert client.post(reverse("api-token"), {"action": "create"}).status_code == 403
    assert ApiToken.objects.count() == 0
