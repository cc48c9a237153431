"""Admin for quota owners: every changelist loads, usage columns, actions, tokens shown once."""

import re

import pytest
from django.contrib import admin
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounts.actions import issue_api_token
from accounts.models import ApiToken
from accounts.tokens import digest_of
from agents.models import BootstrapToken
from cluster.models import Node
from jobs.models import Job
from policy.statuses import JobStatus
from quotas.models import Quota, ResourceType
from tests.conftest import make_node, make_user
from tests.web.conftest import finish, place, submit


@pytest.fixture
def admin_client_(db) -> Client:
    user = make_user("root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


def _changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


@pytest.mark.parametrize(
    "model", list(admin.site._registry), ids=lambda m: f"{m._meta.app_label}.{m.__name__}"
)
def test_every_changelist_loads(admin_client_, job, node, model):
    place(job, node)
    issue_api_token(job.owner)
    assert admin_client_.get(_changelist(model)).status_code == 200


def test_our_models_are_registered():
    registered = {f"{m._meta.app_label}.{m.__name__}" for m in admin.site._registry}
    assert {
        "quotas.Tenant",
        "quotas.Workspace",
        "quotas.Quota",
        "cluster.Node",
        "agents.BootstrapToken",
        "jobs.Job",
        "accounts.ApiToken",
    } <= registered


def test_change_pages_with_inlines_load(admin_client_, job, node, workspace):
    place(job, node)
    for model, pk in ((Job, job.pk), (Node, node.pk), (type(workspace), workspace.pk)):
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[pk])
        response = admin_client_.get(url)
        assert response.status_code == 200, model
    html = admin_client_.get(reverse("admin:jobs_job_change", args=[job.pk])).text
    assert "submitted" in html  # the events inline
    node_html = admin_client_.get(reverse("admin:cluster_node_change", args=[node.pk])).text
    assert "GPU-node-0-7" in node_html  # the devices inline


def test_quota_changelist_shows_used_gpus_without_n_plus_one(
    admin_client_, researcher, workspace, quota, tenant, node, django_assert_num_queries
):
    job = submit(researcher, workspace, quota, workers=2, gpus_per_worker=3)
    place(job, node)
    finish(submit(researcher, workspace, quota, gpus_per_worker=8), make_node("n2"))
    url = _changelist(Quota)
    response = admin_client_.get(url)
    row = next(r for r in response.context["cl"].result_list if r.pk == quota.pk)
    assert row._used == 6 and row._lent == 0  # the finished job no longer counts
    with CaptureQueriesContext(connection) as ctx:
        admin_client_.get(url)
    more = make_node("n3")  # node-0 has 2 GPUs left
    for i in range(5):
        extra = Quota.objects.create(
            tenant=tenant, name=f"q{i}", resource_type=ResourceType.LINGJUN, gpu_type="H200", gpus=1
        )
        workspace.quotas.add(extra)
        place(submit(researcher, workspace, extra, gpus_per_worker=1), more)
    with django_assert_num_queries(len(ctx.captured_queries)):
        admin_client_.get(url)


def test_node_changelist_shows_used_gpus(admin_client_, job, node):
    place(job, node)
    response = admin_client_.get(_changelist(Node))
    assert response.context["cl"].result_list[0]._used == 1


def test_cordon_and_uncordon_actions(admin_client_, node):
    url = _changelist(Node)
    admin_client_.post(url, {"action": "cordon", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert node.cordoned
    admin_client_.post(url, {"action": "uncordon", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert not node.cordoned


def test_terminate_action(admin_client_, researcher, workspace, quota, node):
    pending = submit(researcher, workspace, quota)
    running = submit(researcher, workspace, quota)
    place(running, node)
    done = submit(researcher, workspace, quota)
    finish(done, make_node("n2"))
    response = admin_client_.post(
        _changelist(Job),
        {"action": "terminate", "_selected_action": [pending.pk, running.pk, done.pk]},
        follow=True,
    )
    assert "Terminating 2 job(s)." in response.text
    assert "1 job(s) had already finished." in response.text
    pending.refresh_from_db()
    running.refresh_from_db()
    assert pending.status == JobStatus.TERMINATED
    assert "terminated by admin root" in pending.status_reason
    assert running.stop_requested_at is not None
    assert running.stop_final_status == JobStatus.TERMINATED
    assert set(running.pods.values_list("stop_grace_seconds", flat=True)) == {0}


def test_jobs_are_read_only_in_the_admin(admin_client_, job):
    response = admin_client_.post(
        reverse("admin:jobs_job_change", args=[job.pk]), {"name": "renamed", "status": "Completed"}
    )
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.name == "train" and job.status == JobStatus.PENDING
    assert admin_client_.get(reverse("admin:jobs_job_add")).status_code == 403


def test_bootstrap_token_is_shown_once_and_stored_as_a_digest(admin_client_):
    response = admin_client_.post(
        reverse("admin:agents_bootstraptoken_add"),
        {"note": "rack 7", "single_use": "on", "ttl_hours": "2"},
        follow=True,
    )
    assert response.status_code == 200
    shown = re.findall(r"gqb_[0-9a-f]{8}_[A-Za-z0-9_-]+", response.text)
    assert len(set(shown)) == 1
    plain = shown[0]
    row = BootstrapToken.objects.get()
    assert row.note == "rack 7" and row.single_use
    assert row.digest == digest_of(plain) and plain.split("_")[1] == row.prefix
    stored = " ".join(str(v) for v in BootstrapToken.objects.values().get().values())
    assert plain not in stored
    # Once: the next page does not show it again, and the change page never has it.
    again = admin_client_.get(_changelist(BootstrapToken)).text
    assert plain not in again
    change = admin_client_.get(reverse("admin:agents_bootstraptoken_change", args=[row.pk])).text
    assert plain not in change and row.digest not in change


def test_bootstrap_token_add_validates(admin_client_):
    response = admin_client_.post(
        reverse("admin:agents_bootstraptoken_add"), {"note": "x", "ttl_hours": "0"}
    )
    assert response.status_code == 200 and BootstrapToken.objects.count() == 0


def test_revoke_actions(admin_client_, researcher):
    from agents.actions import issue_bootstrap_token

    boot, _ = issue_bootstrap_token(researcher, "n")
    api_token, _ = issue_api_token(researcher)
    admin_client_.post(
        _changelist(BootstrapToken), {"action": "revoke", "_selected_action": [boot.pk]}
    )
    admin_client_.post(
        _changelist(ApiToken), {"action": "revoke", "_selected_action": [api_token.pk]}
    )
    boot.refresh_from_db()
    api_token.refresh_from_db()
    assert boot.revoked_at is not None and api_token.revoked_at is not None


def test_researchers_cannot_use_the_admin(member_client):
    response = member_client.get(_changelist(Job))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
