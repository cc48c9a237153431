"""The audit log: who did what to which object, when, from where; visible to admins,
filterable, exportable as CSV."""

import csv
import io

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken
from audit.models import AuditEntry
from jobs.models import Job
from policy.statuses import JobStatus
from quotas.models import Quota
from tests.api.conftest import GOOD, client_for, post
from tests.conftest import make_user, post_confirmed
from tests.web.conftest import finish, place

pytestmark = pytest.mark.django_db

ADDRESS = {"REMOTE_ADDR": "203.0.113.7"}


@pytest.fixture
def root(db):
    return make_user("root", is_staff=True, is_superuser=True)


@pytest.fixture
def admin_browser(root) -> Client:
    client = Client(**ADDRESS)
    client.force_login(root)
    return client


def entries(action: str):
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


def test_page_submit_and_stop_are_recorded_with_the_address(researcher, quota, node):
    browser = Client(**ADDRESS)
    browser.force_login(researcher)
    browser.post(reverse("web:create"), {"quota": str(quota.pk), "image": "b", "command": "c"})
    job = Job.objects.get()
    browser.post(reverse("web:stop", args=[job.pk]))
    (submit,) = entries("job.submit")
    (stop,) = entries("job.stop")
    for entry in (submit, stop):
        assert entry.actor == researcher and entry.actor_name == "alice"
        assert (entry.object_type, entry.object_id) == ("job", str(job.pk))
        assert entry.source_address == "203.0.113.7" and entry.via == "web"


def test_api_restart_is_recorded(api, job, node):
    finish(job, node, JobStatus.FAILED)
    new = post(api, f"/api/v1/jobs/{job.pk}/restart").json()
    (restart,) = entries("job.restart")
    assert restart.object_id == str(job.pk) and restart.detail["new_job"] == new["id"]
    assert restart.via == "api" and "gpu" not in restart.user_agent  # test client sends none
    assert entries("job.submit")[-1].object_id == str(new["id"])


def test_admin_terminate_is_recorded(admin_browser, job, node, root):
    place(job, node)
    admin_browser.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "terminate", "_selected_action": [job.pk]},
    )
    (entry,) = entries("job.terminate")
    assert entry.actor == root and entry.via == "admin"
    assert entry.source_address == "203.0.113.7"


def test_what_the_scheduler_and_agents_do_is_not_audited(api, job, node):
    place(job, node)  # Starting, Running: the scheduler's and agents' doing
    finish_job = Job.objects.get(pk=job.pk)
    assert finish_job.status == JobStatus.RUNNING
    assert AuditEntry.objects.exclude(action="job.submit").count() == 0


def test_quota_edit_in_the_admin_is_mirrored(admin_browser, quota, tenant, root):
    url = reverse("admin:quotas_quota_change", args=[quota.pk])
    form = {
        "tenant": tenant.pk,
        "name": "team-a",
        "resource_type": quota.resource_type,
        "gpu_type": "H200",
        "gpus": 24,
        "cpus": quota.cpus,
        "memory_gb": quota.memory_gb,
        "preemption": quota.preemption,
        "weight": quota.weight,  # the admin form posts the field's value
    }
    response = post_confirmed(admin_browser, url, form)
    assert response.status_code == 302, response.content[:2000]
    assert Quota.objects.get().gpus == 24
    (entry,) = entries("quota.change")
    assert entry.actor == root and entry.object_repr == "team-a"
    assert "GPUs" in entry.detail["message"] or "gpus" in entry.detail["message"].lower()
    assert entry.source_address == "203.0.113.7" and entry.via == "admin"


def test_node_actions_are_recorded(admin_browser, researcher, workspace, quota, node):
    from tests.web.conftest import submit

    running = submit(researcher, workspace, quota)
    place(running, node)
    changelist = reverse("admin:cluster_node_changelist")
    for action in ("cordon", "uncordon", "drain", "revoke_tokens"):
        admin_browser.post(
            changelist, {"action": action, "_selected_action": [node.pk], "confirm": "yes"}
        )
    assert [e.action for e in AuditEntry.objects.filter(object_type="node").order_by("id")] == [
        "node.cordon",
        "node.uncordon",
        "node.drain",
        "node.revoke_token",
    ]
    node.refresh_from_db()
    assert node.cordoned and node.token_revoked_at is not None
    # A drain places no new work and lets the running job finish (Slurm's meaning): the job
    # is not stopped, and the node says it is draining.
    running.refresh_from_db()
    assert running.status == JobStatus.RUNNING and running.stop_requested_at is None
    assert node.drain_requested_at is not None
    assert not entries("job.preempt") and not entries("job.stop")


def test_agent_tokens_are_recorded(admin_browser, root):
    from agents.models import BootstrapToken

    add = reverse("admin:agents_bootstraptoken_add")
    admin_browser.post(add, {"note": "rack 7", "single_use": "on", "ttl_hours": 2})
    token = BootstrapToken.objects.get()
    admin_browser.post(
        reverse("admin:agents_bootstraptoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert [e.action for e in AuditEntry.objects.filter(object_type="agent_token")] == [
        "agent_token.revoke",
        "agent_token.add",
    ]


def test_api_tokens_created_and_revoked_are_recorded(researcher, admin_browser):
    browser = Client(**ADDRESS)
    browser.force_login(researcher)
    browser.post(reverse("api-token"), {"action": "create"})
    # Rotation (confirmed, as the page asks) revokes the first.
    browser.post(reverse("api-token"), {"action": "create", "confirm": "yes"})
    first, second = ApiToken.objects.order_by("pk")
    browser.post(reverse("api-token"), {"action": "revoke", "token": str(second.pk)})
    assert [(e.action, e.object_id) for e in AuditEntry.objects.order_by("id")] == [
        ("api_token.create", str(first.pk)),
        ("api_token.revoke", str(first.pk)),
        ("api_token.create", str(second.pk)),
        ("api_token.revoke", str(second.pk)),
    ]
    third = client_for(researcher)  # a token issued directly; revoked by an admin
    assert third.get("/api/v1/me").status_code == 200
    token = ApiToken.objects.filter(revoked_at__isnull=True).get()
    admin_browser.post(
        reverse("admin:accounts_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert entries("api_token.revoke")[-1].object_id == str(token.pk)
    assert third.get("/api/v1/me").status_code == 401


# Admin: visible to admins, filterable, exportable -----------------------------------------


def _some_entries(api, quota, node):
    for name in ("=cmd|' /C calc'!A0", "plain"):
        post(api, "/api/v1/jobs", GOOD | {"name": name})


def test_only_admins_see_the_log(api, quota, node, member_client, admin_browser):
    _some_entries(api, quota, node)
    changelist = reverse("admin:audit_auditentry_changelist")
    assert member_client.get(changelist).status_code == 302  # to the admin's sign-in
    assert member_client.get(reverse("admin:audit_auditentry_export")).status_code == 302
    page = admin_browser.get(changelist + "?action=job.submit")
    assert page.status_code == 200 and "job.submit" in page.text
    entry = AuditEntry.objects.first()
    change = reverse("admin:audit_auditentry_change", args=[entry.pk])
    assert "Save" not in admin_browser.get(change).text  # read-only
    assert (
        admin_browser.post(
            reverse("admin:audit_auditentry_delete", args=[entry.pk]), {"post": "yes"}
        ).status_code
        == 403
    )


def test_csv_export_follows_the_filters_and_defuses_formulas(
    api, colleague, quota, node, admin_browser
):
    _some_entries(api, quota, node)
    job = Job.objects.first()
    post(client_for(colleague), f"/api/v1/jobs/{job.pk}/terminate")  # access.denied
    response = admin_browser.get(reverse("admin:audit_auditentry_export") + "?action=job.submit")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:3] == ["id", "at", "action"]
    assert {row[2] for row in rows[1:]} == {"job.submit"} and len(rows) == 3
    names = {row[6] for row in rows[1:]}
    assert any(n.startswith("'=cmd|") for n in names)  # a formula is written as text
    everything = admin_browser.get(reverse("admin:audit_auditentry_export"))
    all_rows = list(csv.reader(io.StringIO(b"".join(everything.streaming_content).decode())))
    assert "access.denied" in {row[2] for row in all_rows[1:]}


def test_export_selected_entries(api, quota, node, admin_browser):
    _some_entries(api, quota, node)
    chosen = AuditEntry.objects.order_by("id").first()
    response = admin_browser.post(
        reverse("admin:audit_auditentry_changelist"),
        {"action": "export_selected", "_selected_action": [chosen.pk]},
    )
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [row[0] for row in rows[1:]] == [str(chosen.pk)]


def test_a_failing_audit_write_never_blocks_the_action(api, quota, node, monkeypatch):
    import audit.subscribers

    def broken(entries):
        raise RuntimeError("audit store is down")

    monkeypatch.setattr(audit.subscribers, "record_many", broken)
    assert post(api, "/api/v1/jobs", GOOD).status_code == 201
    assert Job.objects.count() == 1 and AuditEntry.objects.count() == 0
