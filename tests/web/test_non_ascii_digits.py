"""A number in a page's query or form is ASCII digits: "²" and "\u0661" (an Arabic-Indic
one) pass `str.isdigit`, but `int` refuses the first (a 500 before) and reads the second as
1. Each is refused or read as a name, never a server error."""

import pytest
from django.test import Client

from quotas.models import Role
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

SUPERSCRIPT_TWO = "\u00b2"


def test_a_clone_of_a_non_number_is_a_new_form(member_client, job):
    response = member_client.get("/jobs/new/", {"clone": SUPERSCRIPT_TWO})
    assert response.status_code == 200
    assert "New job (cloned)" not in response.text


@pytest.mark.parametrize("name", ["rank", "attempt"])
def test_a_non_ascii_rank_is_400_on_the_job_page_and_its_logs(member_client, job, name):
    for path in (f"/jobs/{job.pk}/", f"/jobs/{job.pk}/logs/"):
        assert member_client.get(path, {name: "\u0661"}).status_code == 400, path


def test_revoking_a_non_number_token_is_400(member_client):
    response = member_client.post("/account/token/", {"action": "revoke", "token": "\u0661"})
    assert response.status_code == 400


def test_a_non_ascii_parent_is_no_parent(workspace, tenant):
    client = Client()
    client.force_login(make_user("olga", workspace, role=Role.QUOTA_OWNER))
    response = client.get(f"/quotas/tenant/{tenant.pk}/new/", {"parent": SUPERSCRIPT_TWO})
    assert response.status_code == 200
