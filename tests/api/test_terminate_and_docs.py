"""Admin terminate through the API, and the OpenAPI document and its docs page."""

import pytest

from audit.models import AuditEntry
from policy.statuses import JobStatus
from tests.api.conftest import client_for, error_of, post
from tests.web.conftest import place

pytestmark = pytest.mark.django_db


def test_admins_terminate_any_job(admin_user, job, node):
    place(job, node)
    response = post(client_for(admin_user), f"/api/v1/jobs/{job.pk}/terminate")
    assert response.status_code == 200, response.content
    assert response.json()["display_status"] == "Stopping…"
    job.refresh_from_db()
    assert job.stop_final_status == JobStatus.TERMINATED
    entry = AuditEntry.objects.get(action="job.terminate")
    assert entry.actor == admin_user and entry.object_id == str(job.pk) and entry.via == "api"


def test_members_may_not_terminate(api, job):
    error_of(post(api, f"/api/v1/jobs/{job.pk}/terminate"), 403, "permission_denied")
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    denied = AuditEntry.objects.get(action="access.denied")
    assert denied.detail["status"] == 403 and denied.actor_name == "alice"


def test_outsiders_do_not_learn_the_job_exists(outsider, job):
    error_of(post(client_for(outsider), f"/api/v1/jobs/{job.pk}/terminate"), 404, "not_found")


def test_terminating_a_finished_or_missing_job(admin_user, job, node):
    admin = client_for(admin_user)
    error_of(post(admin, "/api/v1/jobs/424242/terminate"), 404, "not_found")
    post(admin, f"/api/v1/jobs/{job.pk}/terminate")  # Pending: ends at once
    error_of(post(admin, f"/api/v1/jobs/{job.pk}/terminate"), 409, "conflict")


def test_openapi_document(client, db):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path in ("/api/v1/jobs", "/api/v1/jobs/batch", "/api/v1/jobs/array",
                 "/api/v1/jobs/{job_id}/logs", "/api/v1/quotas", "/api/v1/nodes"):  # fmt: skip
        assert path in paths
    create = paths["/api/v1/jobs"]["post"]
    assert {"201", "400", "401", "422", "429"} <= set(create["responses"])
    assert any(p["name"] == "Idempotency-Key" for p in create["parameters"])
    workers = doc["components"]["schemas"]["JobCreate"]["properties"]["workers"]
    workers, null = workers["anyOf"]  # the limits are the number's; null (absent) is allowed
    assert (workers["minimum"], workers["maximum"], null) == (1, 64, {"type": "null"})
    assert doc["components"]["securitySchemes"]["TokenAuth"]["scheme"] == "bearer"


def test_docs_page_loads_only_local_assets(client, db):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.text
    assert "/static/ninja/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower() and "https://" not in html
    assert '"validatorUrl": null' in html
    for asset in ("ninja/swagger-ui-bundle.js", "ninja/swagger-ui.css", "ninja/swagger-ui-init.js"):
        served = client.get(f"/static/{asset}")
        assert served.status_code == 200
        served.close()  # a file response: release the file


def test_the_document_states_the_forms_own_rules(client, db):
    """Bounds in the OpenAPI document are the admission rules' own (protocol.limits) and its
    choices the create page's, so the document and the validation cannot drift apart."""
    from protocol.limits import JOB_BOUNDS as LIMITS
    from web.forms import JobForm

    fields = client.get("/api/v1/openapi.json").json()["components"]["schemas"]["JobCreate"]
    properties = fields["properties"]
    for name, (low, high) in LIMITS.items():
        number, _null = properties[name]["anyOf"]
        assert (number["minimum"], number["maximum"]) == (low, high), name
    for name in ("idle_resources", "run_type", "restart_policy", "hang_action"):
        choices = [value for value, _ in JobForm.base_fields[name].choices]
        choice, _null = properties[name]["anyOf"]
        assert choice["enum"] == choices, name
    assert set(properties) == set(JobForm.base_fields), "the API and the form take one set"
