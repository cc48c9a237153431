"""Workspaces and members on the owner pages (docs/quota-tree.md "Owner pages"): access for
owner, member and outsider on every view, field errors (unknown user, already a member, the
tenant's last owner), audit rows and plain POST and HTMX alike."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.models import AuditEntry
from quotas.models import Membership, Quota, Role, Tenant, Workspace
from tests.conftest import make_user
from tests.web.conftest import HTMX

pytestmark = pytest.mark.django_db


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def owner(workspace):
    return make_user("olga", workspace, role=Role.QUOTA_OWNER, email="olga@example.org")


@pytest.fixture
def owner_client(owner) -> Client:
    return login(owner)


@pytest.fixture
def stranger_client(db) -> Client:
    globex = Tenant.objects.create(name="globex")
    lab = Workspace.objects.create(tenant=globex, name="lab")
    return login(make_user("eve", lab, role=Role.ADMIN))


@pytest.fixture
def newcomer(db):
    return make_user("nina", email="Nina@Example.org")


def membership(workspace, user) -> Membership:
    return Membership.objects.get(workspace=workspace, user=user)


def test_owner_member_outsider_on_every_workspace_view(
    owner_client, member_client, outsider_client, stranger_client, tenant, workspace, researcher
):
    mine = membership(workspace, researcher)
    reads = {
        "detail": reverse("owner-workspace", args=[workspace.pk]),
        "new": reverse("owner-workspace-new", args=[tenant.pk]),
        "remove": reverse("owner-member-remove", args=[mine.pk]),
    }
    writes = {
        "bind": reverse("owner-workspace-bind", args=[workspace.pk]),
        "add": reverse("owner-member-add", args=[workspace.pk]),
        "role": reverse("owner-member-role", args=[mine.pk]),
        "remove": reverse("owner-member-remove", args=[mine.pk]),
        "new": reverse("owner-workspace-new", args=[tenant.pk]),
    }
    for name, url in reads.items():
        assert owner_client.get(url).status_code == 200, name
        assert stranger_client.get(url).status_code == 404, name
        assert Client().get(url).status_code == 302, name
    # A member of the workspace reads it; a member of another workspace of the tenant (an
    # outsider to it) gets a 404; both get a 403 or 404 on every change.
    assert member_client.get(reads["detail"]).status_code == 200
    assert "Change role" not in member_client.get(reads["detail"]).text
    assert outsider_client.get(reads["detail"]).status_code == 404
    assert member_client.get(reads["new"]).status_code == 403
    assert member_client.get(reads["remove"]).status_code == 403
    for name, url in writes.items():
        assert member_client.post(url, {"role": Role.ADMIN}).status_code == 403, name
        assert stranger_client.post(url, {"role": Role.ADMIN}).status_code == 404, name
    for name in ("bind", "add", "role"):
        assert owner_client.get(writes[name]).status_code == 405, name
    assert membership(workspace, researcher).role == Role.RESEARCHER
    # Nothing changed; the refusals of hidden workspaces are audited (audit.denials).
    changed = AuditEntry.objects.filter(object_type="workspace").exclude(action="access.denied")
    assert not changed.exists()
    assert AuditEntry.objects.filter(action="access.denied", object_type="workspace").exists()


def test_add_a_member_by_username_or_email_with_field_errors(
    owner, owner_client, workspace, researcher, newcomer
):
    url = reverse("owner-member-add", args=[workspace.pk])
    unknown = owner_client.post(url, {"user": "nobody", "role": Role.RESEARCHER})
    assert unknown.status_code == 200 and 'id="id_user_error"' in unknown.text
    assert "No active user has the username or e-mail" in unknown.text
    again = owner_client.post(url, {"user": "alice", "role": Role.RESEARCHER})
    assert "alice is already a member of vision." in again.text
    bad_role = owner_client.post(url, {"user": "nina", "role": "king"})
    assert 'id="id_role_error"' in bad_role.text
    added = owner_client.post(url, {"user": "nina@example.org", "role": Role.QUOTA_OWNER})
    assert added.status_code == 302
    assert membership(workspace, newcomer).role == Role.QUOTA_OWNER
    entry = AuditEntry.objects.get(action="workspace.member_add")
    assert entry.actor == owner and entry.detail["changes"]["user"] == [None, "nina"]


def test_change_role_and_the_last_owner_keeps_theirs(owner, owner_client, workspace, researcher):
    mine = membership(workspace, researcher)
    url = reverse("owner-member-role", args=[mine.pk])
    assert owner_client.post(url, {"role": Role.ADMIN}).status_code == 302
    assert membership(workspace, researcher).role == Role.ADMIN
    assert AuditEntry.objects.get(action="workspace.member_role").detail["changes"]["role"] == [
        Role.RESEARCHER,
        Role.ADMIN,
    ]
    # Two owners now: olga may step down; alice is then the last and may not.
    olga = membership(workspace, owner)
    assert (
        owner_client.post(
            reverse("owner-member-role", args=[olga.pk]), {"role": Role.RESEARCHER}
        ).status_code
        == 302
    )
    staff = login(make_user("sam", is_staff=True))
    refused = staff.post(url, {"role": Role.RESEARCHER})
    assert refused.status_code == 200
    assert "alice is the last quota owner of acme" in refused.text
    assert membership(workspace, researcher).role == Role.ADMIN
    removal = staff.get(reverse("owner-member-remove", args=[mine.pk]))
    assert 'data-refusal="1"' in removal.text
    staff.post(reverse("owner-member-remove", args=[mine.pk]))
    assert Membership.objects.filter(pk=mine.pk).exists()


def test_remove_a_member_after_confirmation(owner, owner_client, workspace, researcher):
    mine = membership(workspace, researcher)
    url = reverse("owner-member-remove", args=[mine.pk])
    page = owner_client.get(url)
    assert "Remove alice" in page.text and Membership.objects.filter(pk=mine.pk).exists()
    removed = owner_client.post(url, {"confirm": "1"})
    assert removed.status_code == 302
    assert not Membership.objects.filter(pk=mine.pk).exists()
    assert AuditEntry.objects.get(action="workspace.member_remove").actor == owner


def test_create_a_workspace_and_bind_quotas(
    owner, owner_client, tenant, workspace, quota, other_quota
):
    url = reverse("owner-workspace-new", args=[tenant.pk])
    taken = owner_client.post(url, {"name": "vision"})
    assert 'id="id_name_error"' in taken.text and "already has a workspace vision" in taken.text
    created = owner_client.post(url, {"name": "robotics", "quotas": [quota.pk]})
    assert created.status_code == 302
    robotics = Workspace.objects.get(name="robotics")
    assert list(robotics.quotas.all()) == [quota]
    assert AuditEntry.objects.filter(action="workspace.add").exists()
    bind = reverse("owner-workspace-bind", args=[robotics.pk])
    assert owner_client.post(bind, {"quotas": [other_quota.pk]}).status_code == 302
    assert list(robotics.quotas.all()) == [other_quota]
    foreign = Tenant.objects.create(name="initech")
    theirs = Quota.objects.create(
        tenant=foreign, name="theirs", resource_type="Lingjun", gpu_type="H200", gpus=1
    )
    refused = owner_client.post(bind, {"quotas": [theirs.pk]})
    assert 'id="id_quotas_error"' in refused.text
    assert list(robotics.quotas.all()) == [other_quota]


def test_htmx_partials_on_the_workspace_page(owner_client, workspace, newcomer):
    url = reverse("owner-member-add", args=[workspace.pk])
    errors = owner_client.post(url, {"user": "ghost", "role": Role.RESEARCHER}, **HTMX)
    assert errors.text.lstrip().startswith('<div id="ws-panel"') and "<html" not in errors.text
    added = owner_client.post(url, {"user": "nina", "role": Role.RESEARCHER}, **HTMX)
    assert added["HX-Redirect"] == reverse("owner-workspace", args=[workspace.pk])


def test_the_workspace_page_query_count_is_constant(owner_client, workspace):
    url = reverse("owner-workspace", args=[workspace.pk])
    with CaptureQueriesContext(connection) as small:
        owner_client.get(url)
    for i in range(10):
        make_user(f"member-{i}", workspace)
    with CaptureQueriesContext(connection) as large:
        page = owner_client.get(url)
    assert page.text.count("data-member=") == 11
    assert len(large.captured_queries) == len(small.captured_queries)
