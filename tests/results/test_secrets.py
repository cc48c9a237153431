"""Env values marked secret (policy.secrets, docs/results.md "Run identity"): the workers get
them; the API, the job page, the admin, a clone's form and a template made from the job show
`[redacted]`; a copy must give the value again; a Restart keeps it.

Without the rule every member of the workspace read a job's tokens on its page and in the API."""

import pytest
from django.test import Client
from django.urls import reverse

from jobs.actions.submit import resubmit_job
from jobs.models import Job, JobTemplate
from policy.secrets import (
    REDACTED,
    is_secret,
    placeholder_problem,
    redact_env_lines,
    redacted_fields,
)
from quotas.models import Role
from tests.api.conftest import client_for, error_of, post
from tests.conftest import make_user
from tests.web.conftest import finish

TOKEN = "hf_live_9b1c2d3e4f"
BODY = {
    "quota": "team-a",
    "image": "busybox",
    "command": "echo hi",
    "gpus_per_worker": 1,
    "env": {"HF_TOKEN": TOKEN, "LR": "0.1"},
}


def test_the_rule():
    assert [is_secret(n) for n in ("HF_TOKEN", "DB_PASSWORD", "AWS_KEY", "KEYBOARD", "LR")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert redact_env_lines("LR=0.1\nHF_TOKEN=x\n# API_KEY=y") == (
        f"LR=0.1\nHF_TOKEN={REDACTED}\n# API_KEY=y"
    )
    assert redacted_fields({"env": {"HF_TOKEN": "x"}, "workers": 2}) == {
        "env": {"HF_TOKEN": REDACTED},
        "workers": 2,
    }
    assert redacted_fields({"env": ""}) == {"env": ""}
    assert placeholder_problem("HF_TOKEN", REDACTED).startswith("HF_TOKEN: give the secret's")
    assert placeholder_problem("LR", REDACTED) is None  # not a secret's name: a plain value
    assert placeholder_problem("HF_TOKEN", "x") is None


@pytest.fixture
def job(researcher, quota, node) -> Job:
    response = post(client_for(researcher), "/api/v1/jobs", BODY)
    assert response.status_code == 201, response.content[:300]
    job = Job.objects.get(pk=response.json()["id"])
    assert response.json()["env"] == {"HF_TOKEN": REDACTED, "LR": "0.1"}
    assert job.env["HF_TOKEN"] == TOKEN  # stored for the workers
    return job


def test_the_api_never_shows_a_secret(job, colleague):
    api = client_for(colleague)
    detail = api.get(f"/api/v1/jobs/{job.pk}")
    assert detail.status_code == 200 and TOKEN not in detail.text
    assert detail.json()["env"] == {"HF_TOKEN": REDACTED, "LR": "0.1"}
    listed = api.get("/api/v1/jobs")
    assert listed.status_code == 200 and TOKEN not in listed.text
    assert job.run.config["env"]["HF_TOKEN"] == REDACTED


def test_the_placeholder_is_refused_at_submission(researcher, quota):
    body = {**BODY, "env": {"HF_TOKEN": REDACTED}}
    refused = error_of(post(client_for(researcher), "/api/v1/jobs", body), 400, "validation_error")
    assert "HF_TOKEN: give the secret's value again" in refused["message"]
    assert not Job.objects.exists()


def test_pages_and_copies_never_show_a_secret(job, colleague, node):
    client = Client()
    client.force_login(colleague)
    page = client.get(reverse("web:detail", args=[job.pk]))
    assert page.status_code == 200 and TOKEN not in page.text
    assert f"HF_TOKEN={REDACTED}" in page.text
    form = client.get(reverse("web:create"), {"clone": job.pk})
    assert form.status_code == 200 and TOKEN not in form.text
    assert f"HF_TOKEN={REDACTED}" in form.text
    saved = client.post(reverse("web:save-template", args=[job.pk]), {"template_name": "t1"})
    assert saved.status_code == 302
    assert JobTemplate.objects.get(name="t1").fields["env"] == {
        "HF_TOKEN": REDACTED,
        "LR": "0.1",
    }
    # A Restart is the same job again: its workers get the value.
    finish(job, node)
    again = resubmit_job(Job.objects.get(pk=job.pk), user=colleague)
    assert again.env["HF_TOKEN"] == TOKEN


def test_the_admin_never_shows_a_secret(job, workspace):
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    root = make_user("root", is_staff=True, is_superuser=True)
    for user in (owner, root):
        client = Client()
        client.force_login(user)
        page = client.get(reverse("admin:jobs_job_change", args=[job.pk]))
        assert page.status_code == 200, (user, page.status_code)
        assert TOKEN not in page.text and f"HF_TOKEN={REDACTED}" in page.text
