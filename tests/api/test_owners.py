"""The owners' API: a tenant's tree, quotas created, resized and re-parented with a
`preview=true` dry run (what the owner pages' preview shows), members and roles; the same
checks as the pages, for an owner, a member (403 on a change) and an outsider (404)."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEntry
from quotas.models import Membership, Quota, ResourceType, Role, Tenant, Workspace
from tests.api.conftest import client_for, error_of, post
from tests.conftest import make_user
from tests.web.conftest import place, submit


def patch(client, path: str, body) -> object:
    return client.patch(path, json.dumps(body), content_type="application/json")


@pytest.fixture
def owner(workspace):
    return make_user("olga", workspace, role=Role.QUOTA_OWNER)


@pytest.fixture
def owner_api(owner):
    return client_for(owner)


@pytest.fixture
def member_api(researcher):
    return client_for(researcher)


@pytest.fixture
def globex(db):
    tenant = Tenant.objects.create(name="globex")
    lab = Workspace.objects.create(tenant=tenant, name="lab")
    quota = Quota.objects.create(
        tenant=tenant,
        name="globex-h200",
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=8,
    )
    lab.quotas.add(quota)
    return {
        "tenant": tenant,
        "workspace": lab,
        "quota": quota,
        "owner": make_user("gus", lab, role=Role.QUOTA_OWNER),
    }


@pytest.fixture
def outsider_api(globex):
    return client_for(globex["owner"])


def test_the_tree_for_owners_and_members_not_outsiders(
    owner_api, member_api, outsider_api, quota, other_quota, django_assert_num_queries
):
    tree = owner_api.get("/api/v1/tenants/acme/quotas")
    assert tree.status_code == 200, tree.content
    body = tree.json()
    assert body["can_change"] is True
    assert [q["name"] for q in body["quotas"]] == ["team-a", "team-b"]
    assert member_api.get("/api/v1/tenants/acme/quotas").json()["can_change"] is False
    error_of(outsider_api.get("/api/v1/tenants/acme/quotas"), 404, "not_found")
    # The list's queries do not grow with its quotas.
    with CaptureQueriesContext(connection) as few:
        owner_api.get("/api/v1/tenants/acme/quotas")
    for n in range(5):
        Quota.objects.create(
            tenant=quota.tenant,
            name=f"more-{n}",
            resource_type=quota.resource_type,
            gpu_type="H200",
            gpus=0,
            parent=quota,
        )
    with django_assert_num_queries(len(few.captured_queries)):
        assert len(owner_api.get("/api/v1/tenants/acme/quotas").json()["quotas"]) == 7


def test_a_resize_dry_run_shows_the_preview_and_saves_nothing(
    owner_api, owner, researcher, workspace, quota, node
):
    place(submit(researcher, workspace, quota, name="big", workers=1, gpus_per_worker=8), node)
    dry = patch(owner_api, "/api/v1/quotas/team-a?preview=true", {"gpus": 4})
    assert dry.status_code == 200, dry.content
    body = dry.json()
    assert body["saved"] is False and body["quota"] is None
    preview = body["preview"]
    assert preview["own"] == [{"quota": "team-a", "before": 16, "after": 4}]
    (over,) = preview["over"]
    assert over["quota"] == "team-a" and over["charged"] == 8 and over["jobs"][0]["name"] == "big"
    assert "team-a: 16 → 4 of its own" in preview["lines"]
    assert Quota.objects.get(pk=quota.pk).gpus == 16
    assert not AuditEntry.objects.filter(object_type="quota").exists()
    # Saved with the preview's token: the same path as the pages (audited, via the API).
    saved = patch(owner_api, "/api/v1/quotas/team-a", {"gpus": 4, "token": body["token"]})
    assert saved.status_code == 200, saved.content
    assert saved.json()["saved"] is True and saved.json()["quota"]["gpus"] == 4
    (entry,) = AuditEntry.objects.filter(object_type="quota")
    assert entry.actor == owner and entry.detail["changes"] == {"gpus": [16, 4]}
    assert entry.via == "api"


def test_a_token_of_a_state_that_moved_is_a_conflict(owner_api, quota, other_quota):
    token = patch(owner_api, "/api/v1/quotas/team-a?preview=true", {"gpus": 12}).json()["token"]
    Quota.objects.filter(pk=other_quota.pk).update(gpus=6)
    stale = patch(owner_api, "/api/v1/quotas/team-a", {"gpus": 12, "token": token})
    error_of(stale, 409, "stale_preview")
    assert Quota.objects.get(pk=quota.pk).gpus == 16
    # Without a token the change is saved at once.
    assert patch(owner_api, "/api/v1/quotas/team-a", {"gpus": 12}).json()["saved"] is True


def test_create_and_reparent_with_the_trees_rules(owner_api, quota, other_quota, globex):
    created = post(
        owner_api,
        "/api/v1/tenants/acme/quotas",
        {"name": "team-a-nlp", "parent": "team-a", "gpus": 4},
    )
    assert created.status_code == 201, created.content
    assert created.json()["quota"] == {
        **created.json()["quota"],
        "parent": "team-a",
        "resource_type": "Lingjun",
        "gpu_type": "H200",
    }
    too_big = patch(owner_api, "/api/v1/quotas/team-a-nlp?preview=true", {"gpus": 17})
    error = error_of(too_big, 400, "validation_error")
    assert error["field"] == "gpus" and "carve out" in error["message"]
    moved = patch(owner_api, "/api/v1/quotas/team-a-nlp", {"parent": "team-b"})
    assert moved.status_code == 200 and moved.json()["quota"]["parent"] == "team-b"
    # Another tenant's quota is never a parent, nor seen.
    foreign = patch(owner_api, "/api/v1/quotas/team-a-nlp", {"parent": "globex-h200"})
    assert error_of(foreign, 404, "not_found")["field"] == "parent"
    error_of(patch(owner_api, "/api/v1/quotas/globex-h200", {"gpus": 1}), 404, "not_found")
    strict = post(
        owner_api, "/api/v1/tenants/acme/quotas", {"name": "x", "parent": "team-a", "gpus": -1}
    )
    error_of(strict, 400, "validation_error")
    unknown = patch(owner_api, "/api/v1/quotas/team-a?preveiw=true", {"gpus": 1})
    error_of(unknown, 400, "validation_error")


def test_members_and_outsiders_cannot_change_quotas(member_api, outsider_api, quota):
    error_of(patch(member_api, "/api/v1/quotas/team-a", {"gpus": 1}), 403, "permission_denied")
    error_of(patch(outsider_api, "/api/v1/quotas/team-a", {"gpus": 1}), 404, "not_found")
    body = {"name": "n", "parent": "team-a", "gpus": 1}
    error_of(post(member_api, "/api/v1/tenants/acme/quotas", body), 403, "permission_denied")
    error_of(post(outsider_api, "/api/v1/tenants/acme/quotas", body), 404, "not_found")
    assert Quota.objects.get(pk=quota.pk).gpus == 16


def test_members_added_each_alone_roles_changed_and_removed(
    owner_api, member_api, outsider_api, owner, researcher, workspace
):
    make_user("nina")
    added = post(
        owner_api,
        f"/api/v1/workspaces/{workspace.pk}/members",
        {
            "members": [
                {"user": "nina", "role": "quota_owner"},
                {"user": "nobody"},
                {"user": "alice"},
            ]
        },
    )
    assert added.status_code == 201, added.content
    body = added.json()
    assert [m["user"] for m in body["members"]] == ["nina"]
    assert [(e["index"], e["error"]["field"]) for e in body["errors"]] == [
        (1, "members.1.user"),
        (2, "members.2.user"),
    ]
    assert "already a member" in body["errors"][1]["error"]["message"]
    listing = member_api.get("/api/v1/workspaces/vision/members")
    assert {m["user"]: m["role"] for m in listing.json()["members"]} == {
        "alice": "researcher",
        "nina": "quota_owner",
        "olga": "quota_owner",
    }
    error_of(outsider_api.get("/api/v1/workspaces/vision/members"), 404, "not_found")
    url = "/api/v1/workspaces/vision/members/alice"
    error_of(patch(member_api, url, {"role": "admin"}), 403, "permission_denied")
    error_of(patch(outsider_api, url, {"role": "admin"}), 404, "not_found")
    error_of(patch(owner_api, url, {"role": "boss"}), 400, "validation_error")
    assert patch(owner_api, url, {"role": "admin"}).json()["role"] == "admin"
    assert owner_api.delete(url).status_code == 204
    assert not Membership.objects.filter(user=researcher).exists()
    all_bad = post(owner_api, "/api/v1/workspaces/vision/members", {"members": [{"user": "x"}]})
    error_of(all_bad, 400, "validation_error")


def test_the_last_owner_stays(owner_api, owner, workspace):
    url = "/api/v1/workspaces/vision/members/olga"
    error_of(patch(owner_api, url, {"role": "researcher"}), 409, "last_owner")
    error_of(owner_api.delete(url), 409, "last_owner")
    assert Membership.objects.get(user=owner).role == Role.QUOTA_OWNER


def test_the_document_describes_the_owners_api(owner_api):
    document = owner_api.get("/api/v1/openapi.json").json()
    paths = document["paths"]
    assert {"get", "patch"} <= set(paths["/api/v1/quotas/{ref}"])
    assert {"get", "post"} <= set(paths["/api/v1/tenants/{ref}/quotas"])
    assert {"patch", "delete"} <= set(paths["/api/v1/workspaces/{ref}/members/{username}"])
    change = paths["/api/v1/quotas/{ref}"]["patch"]
    assert any(p["name"] == "preview" for p in change["parameters"])
    assert "409" in change["responses"] and "403" in change["responses"]


def test_the_members_list_queries_do_not_grow(owner_api, owner, workspace):
    url = f"/api/v1/workspaces/{workspace.pk}/members"
    owner_api.get(url)  # the token's first use is noted once
    with CaptureQueriesContext(connection) as few:
        assert owner_api.get(url).status_code == 200
    for n in range(6):
        make_user(f"user-{n}", workspace)
    with CaptureQueriesContext(connection) as many:
        assert len(owner_api.get(url).json()["members"]) == 7
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_sharing_options_through_the_owners_api(owner_api, member_api, quota):
    """The per-quota sharing options (docs/scheduling.md) are read and changed through the
    same path, previewed first; a value outside the choices is refused."""
    path = f"/api/v1/quotas/{quota.pk}"
    body = {"reclaim_within_tree": "LowerPriority", "borrow_within_tree_max_priority": 3}
    preview = patch(owner_api, f"{path}?preview=true", body)
    assert preview.status_code == 200, preview.content
    assert preview.json()["saved"] is False
    quota.refresh_from_db()
    assert quota.reclaim_within_tree == "Any" and quota.borrow_within_tree_max_priority is None
    saved = patch(owner_api, path, body | {"preemption": "LowerOrNewerEqualPriority"})
    assert saved.status_code == 200, saved.content
    quota.refresh_from_db()
    assert quota.reclaim_within_tree == "LowerPriority"
    assert quota.borrow_within_tree_max_priority == 3
    assert quota.preemption == "LowerOrNewerEqualPriority"
    shown = {q["name"]: q for q in owner_api.get("/api/v1/tenants/acme/quotas").json()["quotas"]}
    assert shown[quota.name]["reclaim_within_tree"] == "LowerPriority"
    # Not sent: kept.
    assert patch(owner_api, path, {"weight": 2.0}).status_code == 200
    quota.refresh_from_db()
    assert quota.reclaim_within_tree == "LowerPriority" and quota.weight == 2.0
    assert patch(owner_api, path, {"reclaim_within_tree": "Sometimes"}).status_code in (400, 422)
    error_of(patch(member_api, path, body), 403, "permission_denied")
