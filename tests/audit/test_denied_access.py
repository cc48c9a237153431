"""Denied access leaves a trace (audit.denials): a researcher, or a quota owner of another
tenant, opening a page or API object they may not see is refused as before (404; 403 for
an action they may not take) and the refusal is one audit entry, bounded so that it cannot
flood the log. A role change's entry names the member without a `[null, …]` change.
docs/domain.md ("Denied access")."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.ratelimit import Limit
from audit.models import AuditEntry, Via
from quotas import actions
from quotas.models import Membership, Role, Tenant, Workspace
from tests.api.conftest import client_for
from tests.conftest import make_user
from tests.web.conftest import submit


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _denials():
    return list(AuditEntry.objects.filter(action="access.denied").order_by("id"))


@pytest.fixture
def stranger(db):
    """The quota owner of another tenant."""
    other = Tenant.objects.create(name="globex")
    space = Workspace.objects.create(tenant=other, name="labs")
    return make_user("sam", space, role=Role.QUOTA_OWNER)


def test_a_researcher_opening_another_workspaces_job_is_audited(job, outsider):
    client = _client(outsider)
    assert client.get(reverse("web:detail", args=[job.pk])).status_code == 404
    (entry,) = _denials()
    assert (entry.actor, entry.object_type, entry.object_id) == (outsider, "job", str(job.pk))
    assert entry.via == Via.WEB and entry.detail == {"status": 404, "reason": "not visible"}
    assert entry.object_repr == f"GET /jobs/{job.pk}/"


def test_the_same_denial_is_one_entry_a_minute(job, outsider):
    client = _client(outsider)
    url = reverse("web:detail", args=[job.pk])
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(5):
            assert client.get(url).status_code == 404
        assert len(_denials()) == 1
        clock.shift(timedelta(seconds=61))
        assert client.get(url).status_code == 404
    assert len(_denials()) == 2


def test_a_missing_object_is_not_a_denial(db, outsider):
    assert _client(outsider).get(reverse("web:detail", args=[987654])).status_code == 404
    assert _denials() == []


def test_the_member_sees_the_job_and_nothing_is_audited(job, researcher):
    assert _client(researcher).get(reverse("web:detail", args=[job.pk])).status_code == 200
    assert _denials() == []


def test_an_api_object_refused_is_audited(job, stranger):
    response = client_for(stranger).get(f"/api/v1/jobs/{job.pk}")
    assert response.status_code == 404
    (entry,) = _denials()
    assert (entry.actor, entry.object_type, entry.via) == (stranger, "job", Via.API)


def test_an_owner_of_another_tenant_opening_its_tree_is_audited(stranger, tenant):
    url = reverse("owner-tree", args=[tenant.pk])
    assert _client(stranger).get(url).status_code == 404
    (entry,) = _denials()
    assert (entry.actor, entry.object_type, entry.object_id) == (stranger, "tenant", str(tenant.pk))


def test_an_owner_of_another_tenant_opening_a_workspace_is_audited(stranger, workspace):
    url = reverse("owner-workspace", args=[workspace.pk])
    assert _client(stranger).get(url).status_code == 404
    (entry,) = _denials()
    assert (entry.object_type, entry.object_id) == ("workspace", str(workspace.pk))


def test_a_forbidden_action_is_audited(researcher, colleague, workspace):
    theirs = Membership.objects.get(user=colleague, workspace=workspace)
    url = reverse("owner-member-role", args=[theirs.pk])
    response = _client(researcher).post(url, {"role": Role.ADMIN})
    assert response.status_code == 403
    (entry,) = _denials()
    assert entry.actor == researcher and entry.detail["status"] == 403
    assert Membership.objects.get(pk=theirs.pk).role == Role.RESEARCHER


def test_a_user_cannot_flood_the_log(researcher, workspace, quota, node, outsider, monkeypatch):
    monkeypatch.setattr("audit.denials.PER_USER", Limit(3, 60))
    jobs = [submit(researcher, workspace, quota) for _ in range(6)]
    client = _client(outsider)
    for job in jobs:
        assert client.get(reverse("web:detail", args=[job.pk])).status_code == 404
    entries = _denials()
    assert len(entries) == 4  # three, and one saying the rest were not recorded
    assert "further_denials_not_recorded_for_s" in entries[-1].detail
    assert all("further_denials_not_recorded_for_s" not in e.detail for e in entries[:3])


def test_a_role_change_names_the_member_without_a_null_change(researcher, workspace):
    membership = Membership.objects.get(user=researcher, workspace=workspace)
    actions.change_role(membership, Role.ADMIN)
    entry = AuditEntry.objects.get(action="workspace.member_role")
    assert entry.detail["changes"] == {"role": [Role.RESEARCHER, Role.ADMIN]}
    assert entry.detail["about"] == {"user": researcher.get_username()}
    assert entry.detail["message"] == (
        f"user {researcher.get_username()}; role: {Role.RESEARCHER} → {Role.ADMIN}"
    )
    assert "None" not in entry.detail["message"]


def test_a_member_joins_and_leaves_by_name(researcher, other_workspace):
    membership = actions.add_member(other_workspace, researcher, Role.RESEARCHER)
    actions.remove_member(membership)
    added, removed = AuditEntry.objects.filter(
        action__in=["workspace.member_add", "workspace.member_remove"]
    ).order_by("id")
    name = researcher.get_username()
    assert added.detail["changes"]["user"] == [None, name]
    assert removed.detail["changes"]["user"] == [name, None]
