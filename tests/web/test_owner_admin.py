"""The admin for quota owners: scoped to their tenants, who uses and borrows each quota,
jobs per node, drain, and the warning when guarantees exceed the cluster's GPUs."""

import pytest
from django.test import Client
from django.urls import reverse

from cluster.models import Node
from jobs.models import Pod
from policy.statuses import PodStatus
from quotas import admin as quota_admin
from quotas.models import Quota, ResourceType, Role, Tenant, Workspace
from tests.conftest import make_user, post_confirmed
from tests.web.conftest import borrow, place, submit


@pytest.fixture
def owner_client(workspace) -> Client:
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    assert not owner.is_staff
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def foreign_quota(db) -> Quota:
    globex = Tenant.objects.create(name="globex")
    Workspace.objects.create(tenant=globex, name="lab")
    return Quota.objects.create(
        tenant=globex,
        name="globex-h200",
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=4,
    )


def test_a_quota_owner_uses_the_admin_for_their_tenant_only(
    owner_client, quota, other_quota, foreign_quota
):
    index = owner_client.get(reverse("admin:index"))
    assert index.status_code == 200
    for shown in ("Quotas", "Workspaces", "Jobs", "Nodes"):
        assert f">{shown}</a>" in index.text
    for hidden in ("Tenants", "Bootstrap tokens", "Api tokens"):
        assert f">{hidden}</a>" not in index.text
    listing = owner_client.get(reverse("admin:quotas_quota_changelist")).text
    assert "team-a" in listing and "team-b" in listing and "globex-h200" not in listing
    foreign = owner_client.get(reverse("admin:quotas_quota_change", args=[foreign_quota.pk]))
    assert foreign.status_code == 302  # "doesn't exist": never shown
    assert owner_client.get(reverse("admin:quotas_tenant_changelist")).status_code == 403


def test_a_quota_owner_resizes_a_quota_of_their_tenant(owner_client, quota):
    url = reverse("admin:quotas_quota_change", args=[quota.pk])
    form = owner_client.get(url)
    assert form.status_code == 200
    tenant_choices = form.context["adminform"].form.fields["tenant"].queryset
    assert list(tenant_choices) == [quota.tenant]
    response = post_confirmed(
        owner_client,
        url,
        {
            "tenant": quota.tenant_id,
            "name": quota.name,
            "resource_type": quota.resource_type,
            "gpu_type": quota.gpu_type,
            "gpus": 24,
            "cpus": 0,
            "memory_gb": 0,
            "preemption": quota.preemption,
            "weight": quota.weight,  # the admin form posts the field's value
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    quota.refresh_from_db()
    assert quota.gpus == 24


def test_the_quota_page_says_who_uses_and_who_borrows_it(
    owner_client, researcher, outsider, workspace, other_workspace, quota, other_quota, node
):
    place(submit(researcher, workspace, quota, name="resident", gpus_per_worker=2), node)
    guest = submit(
        outsider,
        other_workspace,
        other_quota,
        name="guest",
        gpus_per_worker=1,
        idle_resources="Only Idle Resources",
    )
    borrow(guest, node, quota, [6])
    html = owner_client.get(reverse("admin:quotas_quota_change", args=[quota.pk])).text
    using = html[html.index("Using its capacity") : html.index("Its jobs on other quotas")]
    assert "resident" in using and "guest" in using and "mallory" in using
    other = owner_client.get(reverse("admin:quotas_quota_change", args=[other_quota.pk])).text
    away = other[other.index("Its jobs on other quotas") :]
    assert "guest" in away and "team-a" in away


def test_warning_when_guarantees_exceed_the_clusters_gpus(owner_client, quota, other_quota, node):
    # team-a (16) + team-b (8) guarantee 24 H200 GPUs; the cluster has one 8-GPU node.
    html = owner_client.get(reverse("admin:quotas_quota_changelist")).text
    assert "quotas guarantee 24 GPUs, but the cluster has 8 H200 GPUs" in html
    Quota.objects.filter(pk__in=[quota.pk, other_quota.pk]).update(gpus=4)
    html = owner_client.get(reverse("admin:quotas_quota_changelist")).text
    assert "quotas guarantee" not in html


def test_jobs_per_node_and_drain(owner_client, researcher, workspace, quota, node):
    job = submit(researcher, workspace, quota, name="resident", gpus_per_worker=2)
    (pod,) = place(job, node)
    page = owner_client.get(reverse("admin:cluster_node_change", args=[node.pk])).text
    assert "resident" in page and "alice" in page
    changelist = reverse("admin:cluster_node_changelist")
    actions = owner_client.get(changelist).context["action_form"].fields["action"].choices
    names = {name for name, _ in actions}
    assert {"cordon", "drain", "uncordon"} <= names and "revoke_tokens" not in names
    asked = owner_client.post(changelist, {"action": "drain", "_selected_action": [node.pk]})
    assert "Drain these nodes?" in asked.text  # a confirmation first: nothing drained yet
    node.refresh_from_db()
    assert node.drain_requested_at is None
    response = owner_client.post(
        changelist,
        {"action": "drain", "_selected_action": [node.pk], "confirm": "yes"},
        follow=True,
    )
    assert "Draining 1 node(s)" in response.text
    node.refresh_from_db()
    assert node.cordoned and node.drain_requested_at is not None
    assert "draining, 1 job(s) left" in owner_client.get(changelist).text
    # Existing work finishes on its own; then the node is drained. Nothing was stopped.
    pod.refresh_from_db()
    assert pod.desired == "Run"
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.SUCCEEDED)
    assert "drained" in owner_client.get(changelist).text
    owner_client.post(changelist, {"action": "uncordon", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert not node.cordoned and node.drain_requested_at is None


def test_a_drained_node_gets_no_new_work(researcher, workspace, quota, node):
    from django.utils import timezone

    from cluster.actions import drain
    from jobs.scheduler.cycle import run_cycle

    drain(Node.objects.filter(pk=node.pk), timezone.now())
    job = submit(researcher, workspace, quota)
    run_cycle()
    job.refresh_from_db()
    assert job.status == "Inqueue" and not job.pods.exists()


def test_other_tenants_jobs_on_a_node_are_shown_by_number(owner_client, foreign_quota, node):
    lab = Workspace.objects.get(name="lab")
    stranger = make_user("sven", lab)
    job = submit(stranger, lab, foreign_quota, name="secret-project")
    place(job, node)
    page = owner_client.get(reverse("admin:cluster_node_change", args=[node.pk])).text
    assert "secret-project" not in page and "(another tenant)" in page and f"#{job.pk}" in page


def test_researchers_still_cannot_use_the_admin(member_client):
    response = member_client.get(reverse("admin:index"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_a_quota_save_refused_at_the_last_moment_is_the_form_again(
    owner_client, quota, other_quota, monkeypatch
):
    """The state moves between the form's check and the save (another owner saved): the
    save is refused (`QuotaChangeRefused`), and the admin shows why instead of a 500."""
    url = reverse("admin:quotas_quota_change", args=[quota.pk])
    data = {
        "tenant": quota.tenant_id, "name": quota.name, "resource_type": quota.resource_type,
        "gpu_type": quota.gpu_type, "gpus": 12, "cpus": 0, "memory_gb": 0,
        "preemption": quota.preemption, "weight": quota.weight,
    }  # fmt: skip
    token = owner_client.post(url, data).context["adminform"].form.data["preview_token"]
    real = quota_admin.change_quota

    def another_owner_saves_first(**kwargs):
        if kwargs.get("save"):
            Quota.objects.filter(pk=other_quota.pk).update(gpus=7)
        return real(**kwargs)

    monkeypatch.setattr(quota_admin, "change_quota", another_owner_saves_first)
    refused = owner_client.post(url, data | {"preview_token": token})
    assert refused.status_code == 302 and refused["Location"] == url
    shown = owner_client.get(url)
    assert "Not saved:" in shown.text and "check and save again" in shown.text
    quota.refresh_from_db()
    assert quota.gpus == 16


def test_an_admin_quota_edit_is_previewed_before_it_is_saved(owner_client, quota, other_quota):
    """The admin goes the owner pages' path: the first save shows the preview and saves
    nothing; saving again with the preview's token saves; a token of a state that moved
    shows the preview again."""
    url = reverse("admin:quotas_quota_change", args=[quota.pk])
    data = {
        "tenant": quota.tenant_id,
        "name": quota.name,
        "resource_type": quota.resource_type,
        "gpu_type": quota.gpu_type,
        "gpus": 12,
        "cpus": 0,
        "memory_gb": 0,
        "preemption": quota.preemption,
        "weight": quota.weight,
    }
    first = owner_client.post(url, data)
    assert first.status_code == 200
    assert "Nothing is saved yet" in first.text
    assert "team-a: 16 → 12 of its own" in first.text
    quota.refresh_from_db()
    assert quota.gpus == 16
    token = first.context["adminform"].form.data["preview_token"]
    assert f'value="{token}"' in first.text  # the next save names the state previewed
    Quota.objects.filter(pk=other_quota.pk).update(gpus=7)  # the state moves
    stale = owner_client.post(url, data | {"preview_token": token})
    assert stale.status_code == 200 and "The state changed since that preview" in stale.text
    quota.refresh_from_db()
    assert quota.gpus == 16
    fresh = stale.context["adminform"].form.data["preview_token"]
    saved = owner_client.post(url, data | {"preview_token": fresh})
    assert saved.status_code == 302
    quota.refresh_from_db()
    assert quota.gpus == 12
