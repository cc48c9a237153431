"""Job templates through the API (docs/templates.md): saved from a job or from fields,
submitted with overrides (checked exactly as a normal submission), and who sees, uses
and deletes them."""

import pytest

from jobs.models import Job, JobTemplate
from policy.jobspec import JobSpec
from quotas.models import Role
from tests.api.conftest import client_for, error_of, post
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

TEMPLATES = "/api/v1/workspaces/vision/templates"


def test_a_job_saved_as_a_template_submits_the_same_job_again(api, job):
    job.env = {"LR": "0.1"}
    job.save(update_fields=["env"])
    saved = post(api, TEMPLATES, {"name": "ddp-8gpu", "from_job": job.pk})
    assert saved.status_code == 201, saved.content
    body = saved.json()
    assert body["name"] == "ddp-8gpu" and body["created_by"] == "alice"
    assert body["fields"]["quota"] == str(job.quota_id) and body["fields"]["env"] == {"LR": "0.1"}
    assert "workspace" not in body["fields"]
    listed = api.get(TEMPLATES).json()["templates"]
    assert [t["name"] for t in listed] == ["ddp-8gpu"]
    assert api.get(f"/api/v1/templates/{body['id']}").json() == listed[0]

    created = post(api, "/api/v1/jobs", {"template": "ddp-8gpu", "workers": 4})
    assert created.status_code == 201, created.content
    again = Job.objects.get(pk=created.json()["id"])
    assert again.workers == 4 and again.workspace_id == job.workspace_id
    left = {"workers", "checkpoint_dir"}  # the override; a clone's folder is its own
    mine = JobSpec.from_job(again).to_fields()
    theirs = JobSpec.from_job(job).to_fields()
    assert {k: v for k, v in mine.items() if k not in left} == {
        k: v for k, v in theirs.items() if k not in left
    }


def test_a_template_from_fields_and_a_bad_override_is_a_field_error(api, quota, node):
    fields = {"quota": "team-a", "image": "busybox", "command": "echo hi", "gpus_per_worker": 2}
    assert post(api, TEMPLATES, {"name": "small", "fields": fields}).status_code == 201
    error = error_of(
        post(api, "/api/v1/jobs", {"template": "small", "workers": 0}), 400, "validation_error"
    )
    assert error["field"] == "workers"
    error = error_of(
        post(api, "/api/v1/jobs", {"template": "small", "workers": "4"}), 400, "validation_error"
    )
    assert error["field"] == "workers"
    error = error_of(post(api, "/api/v1/jobs", {"template": "nope"}), 400, "validation_error")
    assert error["field"] == "template"
    # A template's fields are a job's, read by the same rules.
    bad = {"name": "bad", "fields": {**fields, "workers": 10**9}}
    assert error_of(post(api, TEMPLATES, bad), 400, "validation_error")["field"] == "fields.workers"
    unknown = {"name": "bad", "fields": {**fields, "wrokers": 2}}
    assert error_of(post(api, TEMPLATES, unknown), 400, "validation_error")["field"] == (
        "fields.wrokers"
    )
    taken = post(api, TEMPLATES, {"name": "small", "fields": fields})
    assert error_of(taken, 409, "conflict")["field"] == "name"
    assert (
        error_of(post(api, TEMPLATES, {"name": "a b", "fields": fields}), 400, "validation_error")[
            "field"
        ]
        == "name"
    )
    assert Job.objects.count() == 0


def test_a_normal_submission_still_needs_its_fields(api, quota, node):
    error = error_of(
        post(api, "/api/v1/jobs", {"quota": "team-a", "image": "busybox"}), 400, "validation_error"
    )
    assert error["field"] == "command"


def test_members_use_creators_and_owners_delete_outsiders_see_nothing(
    api, job, colleague, outsider, workspace
):
    template = post(api, TEMPLATES, {"name": "mine", "from_job": job.pk}).json()
    url = f"/api/v1/templates/{template['id']}"
    bob, mallory = client_for(colleague), client_for(outsider)
    owner = client_for(make_user("olga", workspace, role=Role.QUOTA_OWNER))

    assert bob.get(url).status_code == 200
    assert post(bob, "/api/v1/jobs", {"template": "mine"}).status_code == 201
    assert error_of(bob.delete(url), 403, "permission_denied")

    error_of(mallory.get(url), 404, "not_found")
    error_of(mallory.delete(url), 404, "not_found")
    error_of(mallory.get(TEMPLATES), 404, "not_found")
    error_of(post(mallory, TEMPLATES, {"name": "x", "from_job": job.pk}), 404, "not_found")
    assert (
        error_of(post(mallory, "/api/v1/jobs", {"template": "mine"}), 400, "validation_error")[
            "field"
        ]
        == "template"
    )

    assert owner.delete(url).status_code == 204
    assert not JobTemplate.objects.exists()
    again = post(api, TEMPLATES, {"name": "mine", "from_job": job.pk}).json()
    assert api.delete(f"/api/v1/templates/{again['id']}").status_code == 204
