"""The Templates page (docs/templates.md, "Pages"): the user's workspaces' templates with
Use and, for their creator and the tenant's owners, Delete; access for every role, and a
query count that does not grow with the templates."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs.actions.templates import save_template
from jobs.models import JobTemplate
from quotas.models import Role
from tests.conftest import make_user

FIELDS = {"quota": "team-a", "image": "pytorch:2.4", "command": "python train.py",
          "workers": 2, "gpus_per_worker": 4}  # fmt: skip


def login_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def template(researcher, workspace):
    return save_template(workspace=workspace, name="ddp-8gpu", fields=FIELDS, user=researcher)


def _delete(client, template):
    return client.post(reverse("web:template-delete", args=[template.pk]))


def test_members_see_and_use_it(member_client, colleague_client, template):
    for client in (member_client, colleague_client):
        html = client.get(reverse("web:templates")).text
        assert "<code>ddp-8gpu</code>" in html and "pytorch:2.4 · workers 2, GPUs each 4" in html
        assert f'href="{reverse("web:create")}?template={template.pk}"' in html
    use = member_client.get(reverse("web:create") + f"?template={template.pk}")
    assert use.status_code == 200 and use.context["form"].initial["workers"] == 2


def test_delete_is_offered_to_its_creator_and_owners_only(
    member_client, colleague_client, template, workspace
):
    action = reverse("web:template-delete", args=[template.pk])
    assert action in member_client.get(reverse("web:templates")).text  # its creator
    assert action not in colleague_client.get(reverse("web:templates")).text
    owner = login_client(make_user("olga", workspace, role=Role.QUOTA_OWNER))
    assert action in owner.get(reverse("web:templates")).text


def test_a_colleague_may_not_delete_it(colleague_client, template):
    assert _delete(colleague_client, template).status_code == 403
    assert JobTemplate.objects.filter(pk=template.pk).exists()


@pytest.mark.parametrize("who", ["creator", "owner"])
def test_its_creator_or_an_owner_deletes_it(member_client, template, workspace, who):
    client = member_client
    if who == "owner":
        client = login_client(make_user("olga", workspace, role=Role.QUOTA_OWNER))
    response = _delete(client, template)
    assert response.status_code == 302 and response["Location"] == reverse("web:templates")
    assert not JobTemplate.objects.exists()
    assert "deleted" in client.get(reverse("web:templates")).text


def test_an_outsider_sees_nothing_and_deletes_nothing(outsider_client, template):
    assert "ddp-8gpu" not in outsider_client.get(reverse("web:templates")).text
    assert _delete(outsider_client, template).status_code == 404
    assert (
        outsider_client.get(reverse("web:create") + f"?template={template.pk}").status_code == 404
    )
    assert JobTemplate.objects.filter(pk=template.pk).exists()


def test_anonymous_is_sent_to_login_and_wrong_methods_are_405(client, member_client, template):
    for response in (client.get(reverse("web:templates")), _delete(client, template)):
        assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert member_client.post(reverse("web:templates")).status_code == 405
    delete = reverse("web:template-delete", args=[template.pk])
    assert member_client.get(delete).status_code == 405
    assert JobTemplate.objects.filter(pk=template.pk).exists()


def test_the_page_reads_a_constant_number_of_queries(member_client, researcher, workspace):
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert member_client.get(reverse("web:templates")).status_code == 200
        return len(queries)

    save_template(workspace=workspace, name="t0", fields=FIELDS, user=researcher)
    few = count()
    for i in range(1, 30):
        save_template(workspace=workspace, name=f"t{i}", fields=FIELDS, user=researcher)
    assert count() == few


def test_no_templates_says_how_to_make_one(member_client, db):
    assert "Save as template" in member_client.get(reverse("web:templates")).text
