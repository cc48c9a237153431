"""Quota owners' changes in the admin (they are not staff): every write goes through
`quotas.actions`, is audited with its before and after, and asks for a scheduling cycle."""

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEntry
from jobs.models import Job
from jobs.scheduler.cycle import run_cycle
from policy.statuses import JobStatus
from quotas import actions
from quotas.models import Membership, Quota, Role
from tests.conftest import make_node, make_user, post_confirmed
from tests.web.conftest import place, submit

pytestmark = pytest.mark.django_db

ADDRESS = {"REMOTE_ADDR": "203.0.113.9"}


@pytest.fixture
def owner(workspace):
    user = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    assert not user.is_staff and not user.is_superuser
    return user


@pytest.fixture
def owner_client(owner) -> Client:
    client = Client(**ADDRESS)
    client.force_login(owner)
    return client


def quota_form(quota: Quota, **changes) -> dict:
    form = {
        "tenant": quota.tenant_id,
        "name": quota.name,
        "resource_type": quota.resource_type,
        "gpu_type": quota.gpu_type,
        "gpus": quota.gpus,
        "cpus": quota.cpus,
        "memory_gb": quota.memory_gb,
        "preemption": quota.preemption,
        "weight": quota.weight,  # the admin form posts the field's value
    }
    return form | changes


def test_an_owners_resize_is_audited_and_starts_a_scheduling_cycle(
    owner, owner_client, researcher, workspace, quota, django_capture_on_commit_callbacks
):
    busy = make_node("node-0")
    make_node("node-1")
    actions.update_quota(quota, gpus=8)
    running = submit(researcher, workspace, quota, workers=1, gpus_per_worker=8)
    place(running, busy)
    waiting = submit(researcher, workspace, quota, name="second", workers=1, gpus_per_worker=8)
    run_cycle()
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.INQUEUE  # the quota is full
    AuditEntry.objects.all().delete()

    url = reverse("admin:quotas_quota_change", args=[quota.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = post_confirmed(owner_client, url, quota_form(quota, gpus=16))
    assert response.status_code == 302, response.content[:2000]

    (entry,) = AuditEntry.objects.filter(object_type="quota")
    assert entry.action == "quota.change" and entry.actor == owner
    assert entry.detail["changes"] == {"gpus": [8, 16]}
    assert entry.via == "admin" and entry.source_address == "203.0.113.9"
    # The cycle the resize asked for admitted the waiting job at once.
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.STARTING


def test_an_owners_new_quota_and_members_are_audited(owner, owner_client, workspace, tenant):
    response = post_confirmed(
        owner_client,
        reverse("admin:quotas_quota_add"),
        quota_form(
            Quota(tenant=tenant, name="team-new", resource_type="Lingjun", gpu_type="H200", gpus=4)
        ),
    )
    assert response.status_code == 302, response.content[:2000]
    created = Quota.objects.get(name="team-new")
    newcomer = make_user("nina")
    prefix = "memberships"
    members = list(workspace.memberships.order_by("pk"))
    form = {
        "tenant": tenant.pk,
        "name": workspace.name,
        "quotas": [created.pk],
        f"{prefix}-TOTAL_FORMS": len(members) + 1,
        f"{prefix}-INITIAL_FORMS": len(members),
    }
    for i, membership in enumerate(members):
        form |= {
            f"{prefix}-{i}-id": membership.pk,
            f"{prefix}-{i}-workspace": workspace.pk,
            f"{prefix}-{i}-user": membership.user_id,
            f"{prefix}-{i}-role": membership.role,
        }
    new = len(members)
    form |= {f"{prefix}-{new}-workspace": workspace.pk, f"{prefix}-{new}-user": newcomer.pk}
    form |= {f"{prefix}-{new}-role": Role.RESEARCHER}
    response = owner_client.post(
        reverse("admin:quotas_workspace_change", args=[workspace.pk]), form
    )
    assert response.status_code == 302, response.content[:3000]

    assert Membership.objects.filter(workspace=workspace, user=newcomer).exists()
    assert list(workspace.quotas.all()) == [created]
    actions_seen = list(AuditEntry.objects.order_by("id").values_list("action", "actor"))
    assert actions_seen == [
        ("quota.add", owner.pk),
        ("workspace.bind_quotas", owner.pk),
        ("workspace.member_add", owner.pk),
    ]
    assert AuditEntry.objects.get(action="quota.add").detail["changes"]["gpus"] == [None, 4]


def test_an_owners_drain_is_audited(owner, owner_client, node):
    changelist = reverse("admin:cluster_node_changelist")
    drain = {"action": "drain", "_selected_action": [node.pk]}
    asked = owner_client.post(changelist, drain)  # a drain asks for a confirmation first
    assert asked.status_code == 200 and not AuditEntry.objects.filter(object_type="node")
    response = owner_client.post(changelist, {**drain, "confirm": "yes"})
    assert response.status_code == 302
    (entry,) = AuditEntry.objects.filter(object_type="node")
    assert entry.action == "node.drain" and entry.actor == owner and entry.via == "admin"


def test_a_rule_refuses_a_change_with_field_errors(monkeypatch, owner_client, quota):
    def at_most_twelve(candidate: Quota, before: Quota | None) -> dict[str, list[str]]:
        return {"gpus": ["at most 12 GPUs here"]} if candidate.gpus > 12 else {}

    monkeypatch.setattr(actions, "QUOTA_RULES", [at_most_twelve])
    with pytest.raises(actions.QuotaChangeRefused) as refused:
        actions.update_quota(quota, gpus=24)
    assert refused.value.errors == {"gpus": ["at most 12 GPUs here"]}

    url = reverse("admin:quotas_quota_change", args=[quota.pk])
    page = post_confirmed(owner_client, url, quota_form(Quota.objects.get(pk=quota.pk), gpus=24))
    assert page.status_code == 200 and "at most 12 GPUs here" in page.text
    assert Quota.objects.get(pk=quota.pk).gpus == 16
    assert not AuditEntry.objects.filter(object_type="quota").exists()


def test_every_action_is_audited_and_asks_for_a_cycle(
    tenant, researcher, django_capture_on_commit_callbacks, monkeypatch
):
    from jobs import triggers

    cycles = []
    monkeypatch.setitem(triggers._senders, triggers.SCHEDULER, lambda: cycles.append(1))
    with django_capture_on_commit_callbacks(execute=True):
        other = actions.create_tenant("globex")
        actions.update_tenant(other, name="globex-labs")
        space = actions.create_workspace(other, "lab")
        quota = actions.create_quota(
            tenant=other, name="gx", resource_type="Lingjun", gpu_type="H200", gpus=2
        )
        actions.bind_quotas(space, [quota])
        member = actions.add_member(space, researcher, Role.RESEARCHER)
        actions.change_role(member, Role.QUOTA_OWNER)
        actions.remove_member(member)
        actions.bind_quotas(space, [])
        actions.delete_quota(quota)
        actions.delete_workspace(space)
        actions.delete_tenant(other)
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "tenant.add",
        "tenant.change",
        "workspace.add",
        "quota.add",
        "workspace.bind_quotas",
        "workspace.member_add",
        "workspace.member_role",
        "workspace.member_remove",
        "workspace.bind_quotas",
        "quota.delete",
        "workspace.delete",
        "tenant.delete",
    ]
    assert len(cycles) == 12
