"""The owners' audit page of a tenant (/quotas/tenant/<id>/audit/): its entries only
(quotas, a deleted quota's too, workspaces and members, jobs), filtered, paged, and as
CSV with the same filters; owners and staff only (a member 403, an outsider 404)."""

import csv
import io

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from quotas import actions
from quotas.models import ResourceType, Role
from tests.conftest import make_user
from tests.web.conftest import submit


@pytest.fixture
def owner(workspace):
    return make_user("olga", workspace, role=Role.QUOTA_OWNER)


@pytest.fixture
def owner_client(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def history(owner, researcher, tenant, workspace, quota):
    """Changes of acme (by olga) and of globex (by gus), on different days."""
    globex = actions.create_tenant("globex")
    lab = actions.create_workspace(globex, "lab")
    gus = make_user("gus", lab, role=Role.QUOTA_OWNER)
    with time_machine.travel("2026-11-01 10:00Z", tick=False):
        actions.update_quota(quota, gpus=12, actor=owner)
        gone = actions.create_quota(
            tenant=tenant,
            name="short-lived",
            resource_type=ResourceType.LINGJUN,
            gpu_type="H200",
            gpus=0,
            parent=quota,
            actor=owner,
        )
        actions.delete_quota(gone, actor=owner)
    with time_machine.travel("2026-11-05 10:00Z", tick=False):
        actions.add_member(workspace, make_user("nina"), Role.RESEARCHER, actor=owner)
        actions.create_quota(
            tenant=globex,
            name="globex-secret",
            resource_type=ResourceType.LINGJUN,
            gpu_type="H200",
            gpus=4,
            actor=gus,
        )
    submit(researcher, workspace, quota, name="audited-job")
    return {"globex": globex, "gus": gus}


def url(tenant, **query) -> str:
    base = reverse("owner-audit", args=[tenant.pk])
    return base + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_the_owner_sees_their_tenants_entries_only(owner_client, tenant, history):
    page = owner_client.get(url(tenant))
    assert page.status_code == 200
    shown = {e.action for e in page.context["page"]}
    assert {"quota.change", "quota.add", "quota.delete", "workspace.member_add"} <= shown
    assert "short-lived" in page.text  # a deleted quota's entries stay its tenant's
    assert "globex-secret" not in page.text and "gus" not in page.text
    assert 'href="/quotas/tenant/' in page.text


def test_a_deleted_workspaces_entries_stay_its_tenants(owner_client, owner, tenant, history):
    temporary = actions.create_workspace(tenant, "temp-lab", actor=owner)
    actions.add_member(temporary, make_user("tina"), Role.RESEARCHER, actor=owner)
    actions.delete_workspace(temporary, actor=owner)
    page = owner_client.get(url(tenant))
    shown = {
        e.action
        for e in page.context["page"]
        if (e.object_type, e.object_id) == ("workspace", str(temporary.pk))  # ids of a kind
    }
    assert shown == {"workspace.add", "workspace.member_add", "workspace.delete"}, shown
    gus = Client()
    gus.force_login(history["gus"])
    assert "temp-lab" not in gus.get(url(history["globex"])).text


def test_filters_and_pages(owner_client, tenant, history, monkeypatch):
    only = owner_client.get(url(tenant, action="quota.", since="2026-11-01", until="2026-11-01"))
    assert {e.action for e in only.context["page"]} == {"quota.change", "quota.add", "quota.delete"}
    by_kind = owner_client.get(url(tenant, kind="workspace"))
    assert {e.action for e in by_kind.context["page"]} == {"workspace.member_add"}
    nobody = owner_client.get(url(tenant, actor="nobody"))
    assert "No entries match these filters" in nobody.text
    from web import views_audit

    monkeypatch.setattr(views_audit, "PER_PAGE", 2)
    first = owner_client.get(url(tenant, action="quota."))
    assert first.context["page"].paginator.num_pages == 2 and 'rel="next"' in first.text
    second = owner_client.get(url(tenant, action="quota.", page=2))
    assert len(second.context["page"]) == 1 and "action=quota." in second.text


def test_csv_with_the_same_filters(owner_client, tenant, history):
    response = owner_client.get(reverse("owner-audit-csv", args=[tenant.pk]) + "?kind=quota")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    table = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert table[0][:3] == ["id", "at", "action"]
    assert sorted(row[2] for row in table[1:]) == ["quota.add", "quota.change", "quota.delete"]


def test_members_outsiders_and_strangers(member_client, tenant, history):
    assert member_client.get(url(tenant)).status_code == 403
    assert member_client.get(reverse("owner-audit-csv", args=[tenant.pk])).status_code == 403
    gus = Client()
    gus.force_login(history["gus"])
    assert gus.get(url(tenant)).status_code == 404
    assert gus.get(reverse("owner-audit-csv", args=[tenant.pk])).status_code == 404
    assert gus.get(url(history["globex"])).status_code == 200
    anonymous = Client().get(url(tenant))
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]


def test_the_page_queries_do_not_grow_with_entries(owner_client, owner, tenant, quota, history):
    with CaptureQueriesContext(connection) as few:
        owner_client.get(url(tenant))
    for n in range(20):
        actions.update_quota(quota, weight=1.0 + n, actor=owner)
    with CaptureQueriesContext(connection) as many:
        page = owner_client.get(url(tenant))
    assert len(page.context["page"]) > 20
    assert len(many.captured_queries) == len(few.captured_queries)
