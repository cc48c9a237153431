"""The admin's quota form and the tree's rules (docs/quota-tree.md "Rules for quota owners"):
a bad parent, size or limit is a field error and nothing is saved; owners pick parents among
their own tenants' quotas only."""

import pytest
from django.test import Client
from django.urls import reverse

from quotas.models import Quota, ResourceType, Role, Tenant
from tests.conftest import make_user, post_confirmed


@pytest.fixture
def owner_client(workspace) -> Client:
    client = Client()
    client.force_login(make_user("olga", workspace, role=Role.QUOTA_OWNER))
    return client


@pytest.fixture
def org(tenant, quota, other_quota) -> Quota:
    """org 32 ▸ team-a 16, team-b 8 (the fixtures' quotas)."""
    org = Quota.objects.create(
        tenant=tenant, name="org", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=32
    )
    Quota.objects.filter(pk__in=[quota.pk, other_quota.pk]).update(parent=org)
    return org


def form_of(quota: Quota, **changes) -> dict:
    values = {
        "tenant": quota.tenant_id,
        "name": quota.name,
        "resource_type": quota.resource_type,
        "gpu_type": quota.gpu_type,
        "gpus": quota.gpus,
        "cpus": quota.cpus,
        "memory_gb": quota.memory_gb,
        "preemption": quota.preemption,
        "parent": quota.parent_id or "",
        "max_gpus": "" if quota.max_gpus is None else quota.max_gpus,
        "lending_limit": "" if quota.lending_limit is None else quota.lending_limit,
        "weight": quota.weight,
    }
    return values | changes


def change(client, quota: Quota, **changes):
    url = reverse("admin:quotas_quota_change", args=[quota.pk])
    return post_confirmed(client, url, form_of(quota, **changes))


def test_the_form_shows_the_tree_fields(owner_client, org, quota):
    form = owner_client.get(reverse("admin:quotas_quota_change", args=[quota.pk]))
    for field in ("parent", "max_gpus", "lending_limit", "weight"):
        assert f'name="{field}"' in form.text


def test_owners_pick_parents_of_their_tenants_only(owner_client, org, quota):
    Quota.objects.create(
        tenant=Tenant.objects.create(name="globex"),
        name="globex-h200",
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=64,
    )
    form = owner_client.get(reverse("admin:quotas_quota_change", args=[quota.pk]))
    parents = form.context["adminform"].form.fields["parent"].queryset
    assert "globex-h200" not in {q.name for q in parents}
    assert "org" in {q.name for q in parents}


@pytest.mark.parametrize(
    ("who", "changes", "field", "message"),
    [
        ("team-a", {"gpus": 25}, "gpus", "Quota org guarantees 32 GPUs; its children would "
         "carve out 33 (25 here, 8 in team-b)."),
        ("org", {"gpus": 23}, "gpus", "Its children team-a, team-b carve out 24 GPUs; the "
         "guarantee cannot be below that (23)."),
        ("org", {"parent": "team-a"}, "parent", "Quota team-a is inside this quota's subtree "
         "(a cycle)."),
        ("team-a", {"max_gpus": 8}, "max_gpus", "The limit (8 GPUs) is below the guarantee "
         "(16 GPUs)."),
        ("team-a", {"weight": 0}, "weight", "The weight must be a number above 0."),
        ("org", {"gpu_type": "A100"}, "gpu_type", "Its children team-a, team-b share its GPU "
         "type."),
    ],
)  # fmt: skip
def test_a_change_breaking_the_tree_is_a_field_error_and_saves_nothing(
    admin_client, org, who, changes, field, message
):
    quota = Quota.objects.get(name=who)
    if "parent" in changes:
        changes["parent"] = Quota.objects.get(name=changes["parent"]).pk
    before = list(Quota.objects.order_by("pk").values())
    response = change(admin_client, quota, **changes)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors[field] == [message]
    assert list(Quota.objects.order_by("pk").values()) == before


def test_a_parent_of_another_gpu_type_is_refused_on_add(owner_client, org):
    a100 = Quota.objects.create(
        tenant=org.tenant, name="a100", resource_type="Lingjun", gpu_type="A100", gpus=8
    )
    response = post_confirmed(
        owner_client,
        reverse("admin:quotas_quota_add"),
        form_of(org, name="new", gpus=0, parent=a100.pk),
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["parent"] == [
        "Quota a100 is for A100, not H200."
    ]
    assert not Quota.objects.filter(name="new").exists()


def test_a_valid_tree_change_is_saved(owner_client, org, quota):
    response = change(owner_client, quota, gpus=24, max_gpus=32, lending_limit=4, weight=2)
    assert response.status_code == 302, response.context["adminform"].form.errors
    quota.refresh_from_db()
    assert (quota.gpus, quota.max_gpus, quota.lending_limit, quota.weight) == (24, 32, 4, 2.0)
