"""Nested checkpoint folders (issue 34, item 3; docs/fault-tolerance.md, "Checkpoint
folders"): a folder equal to, inside or enclosing another job's (a live job's, or one
holding committed checkpoints) is refused at submission with a field error, in the API, the
form, batches and arrays; of two items of one batch claiming the same or nested folders the
second is refused alone. The rule is pure (`policy.folders`). The old code compared equal
folders only: the outer job's pruning deleted the inner job's checkpoints."""

import threading
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from agents import sdk
from api import jobs as api_jobs
from jobs.actions import submit as submit_actions
from jobs.models import Checkpoint, Job, ResultUnit
from policy.folders import Claim, Overlap, ancestors, conflict, overlap
from policy.statuses import JobStatus
from tests.api.conftest import GOOD, client_for, error_of, post
from tests.scheduler.threads import run_together
from tests.web.conftest import submit
from tests.web.test_create_page import FORM
from web import forms as web_forms

# -- the pure rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("new", "other", "how"),
    [
        ("runs/a", "runs/a", Overlap.EQUAL),
        ("runs/a/b", "runs/a", Overlap.INSIDE),
        ("runs", "runs/a", Overlap.ENCLOSES),
        ("runs/ab", "runs/a", None),  # a prefix of the name is not a folder above it
        ("runs/a", "runs/ab", None),
        ("runs/b", "runs/a", None),
        ("job-1", "job-12", None),
    ],
)
def test_overlap(new, other, how):
    assert overlap(new, other) == how


def test_conflict_prefers_equal_and_ignores_the_same_job():
    claims = [Claim("a", "checkpoint", 1), Claim("a/b", "checkpoint", 2)]
    found = conflict(Claim("a/b", "checkpoint", 9), claims)
    assert found is not None and (found.claim.job, found.overlap) == (2, Overlap.EQUAL)
    assert conflict(Claim("a/b/c", "output", 2), [Claim("a/b", "checkpoint", 2)]) is None
    inside = conflict(Claim("a/b/c", "checkpoint", 9), [Claim("a/b", "output", 2)])
    assert inside is not None and "inside a/b, which job #2 uses" in inside.message()
    assert ancestors("a/b/c") == ["a", "a/b"]


# -- the API, the form, batches and arrays -------------------------------------------------


def submit_folder(researcher, folder: str):
    return post(client_for(researcher), "/api/v1/jobs", {**GOOD, "checkpoint_dir": folder})


@pytest.fixture
def outer(researcher, workspace, quota):
    """A live job in runs/exp."""
    return submit(researcher, workspace, quota, checkpoint_dir="runs/exp")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("folder", "words"),
    [
        ("runs/exp", "already uses this folder"),
        ("runs/exp/inner", "This folder is inside runs/exp"),
        ("runs", "This folder holds runs/exp"),
    ],
)
def test_equal_nested_and_enclosing_folders_are_refused(outer, researcher, node, folder, words):
    error = error_of(submit_folder(researcher, folder), 400, "validation_error")
    assert error["field"] == "checkpoint_dir"
    assert words in error["message"] and f"job #{outer.pk}" in error["message"]
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_a_sibling_and_a_name_sharing_a_prefix_are_free(outer, researcher, node):
    assert submit_folder(researcher, "runs/exp2").status_code == 201
    assert submit_folder(researcher, "runs/other/x").status_code == 201


@pytest.mark.django_db
def test_a_finished_job_counts_only_while_its_folder_holds_checkpoints(outer, researcher, node):
    Job.objects.filter(pk=outer.pk).update(status=JobStatus.COMPLETED)
    Checkpoint.objects.create(
        job=outer, attempt=1, step=5, path="/a/runs/exp/step-5", committed=True
    )
    error = error_of(submit_folder(researcher, "runs/exp/inner"), 400, "validation_error")
    assert "inside runs/exp" in error["message"]
    Checkpoint.objects.filter(job=outer).update(pruned_at="2026-01-01T00:00:00Z")
    assert submit_folder(researcher, "runs/exp/inner").status_code == 201


@pytest.mark.django_db
def test_a_finished_job_counts_while_its_folder_holds_accepted_results(outer, researcher, node):
    """docs/results.md: a run's accepted result lies in its folder; a job nested there
    would write beside it, an enclosing one would prune around it."""
    Job.objects.filter(pk=outer.pk).update(status=JobStatus.COMPLETED)
    ResultUnit.objects.create(
        job=outer, unit="p1", digest="c" * 64, attempt=1, accepted_at="2026-01-01T00:00:00Z"
    )
    error = error_of(submit_folder(researcher, "runs/exp/inner"), 400, "validation_error")
    assert "inside runs/exp" in error["message"]
    error = error_of(submit_folder(researcher, "runs"), 400, "validation_error")
    assert "holds runs/exp" in error["message"]
    ResultUnit.objects.filter(job=outer).delete()
    assert submit_folder(researcher, "runs/exp/inner").status_code == 201


@pytest.mark.django_db
def test_another_jobs_default_folder_encloses(researcher, workspace, quota, node):
    other = submit(researcher, workspace, quota)  # checkpoints to its default job-<id>
    error = error_of(submit_folder(researcher, f"job-{other.pk}/x"), 400, "validation_error")
    assert f"inside job-{other.pk}" in error["message"]


@pytest.mark.django_db
def test_the_second_of_two_batch_items_claiming_nested_folders_is_refused_alone(
    researcher, quota, node
):
    jobs = [
        {**GOOD, "name": "a", "checkpoint_dir": "sweep"},
        {**GOOD, "name": "b", "checkpoint_dir": "sweep/b"},
        {**GOOD, "name": "c", "checkpoint_dir": "sweep"},
        {**GOOD, "name": "d", "checkpoint_dir": "elsewhere"},
    ]
    response = post(client_for(researcher), "/api/v1/jobs/batch", {"jobs": jobs})
    assert response.status_code == 201, response.content[:500]
    body = response.json()
    assert [j["name"] for j in body["jobs"]] == ["a", "d"]
    errors = {e["index"]: e["error"] for e in body["errors"]}
    assert sorted(errors) == [1, 2]
    assert errors[1]["field"] == "checkpoint_dir"
    assert "inside sweep, which an earlier job of this batch (a) uses" in errors[1]["message"]
    assert "An earlier job of this batch (a) already uses" in errors[2]["message"]


@pytest.mark.django_db
def test_an_array_inside_or_around_another_jobs_folder_is_refused(outer, researcher, node):
    for base in ("runs/exp/sweep", "runs"):
        body = {"count": 2, "job": {**GOOD, "checkpoint_dir": base}}
        response = post(client_for(researcher), "/api/v1/jobs/array", body)
        assert error_of(response, 400, "validation_error")["field"] == "job.checkpoint_dir"
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_the_form_shows_the_field_error(outer, researcher, quota, node):
    from web.forms import JobForm

    data = {
        "quota": str(quota.pk),
        "image": "busybox",
        "command": "echo hi",
        "workers": "1",
        "gpus_per_worker": "1",
        "cpus_per_worker": "4",
        "memory_gb_per_worker": "16",
        "priority": "1",
        "idle_resources": "Off",
        "checkpoint_dir": "runs/exp/mine",
    }
    form = JobForm(data, user=researcher)
    assert not form.is_valid()
    assert "This folder is inside runs/exp" in " ".join(form.errors["checkpoint_dir"])


# -- pruning stays inside the job's own folder ---------------------------------------------


def test_pruning_never_deletes_a_folder_nested_in_the_jobs_own(tmp_path: Path):
    root = tmp_path / "outer"
    inner = root / "step-3" / "step-100"  # another job's folder that happens to sit here
    inner.mkdir(parents=True)
    (inner / "state.json").write_text("{}")
    for step in (5, 6, 7):
        sdk.checkpoint(step, {"step": step}, keep=2, root=root)
    assert inner.exists()
    assert [step for step, _ in sdk.committed(root)] == [6, 7]
    partial = root / "step-4"
    partial.mkdir()
    (partial / "state.json").write_text("half")
    sdk.checkpoint(8, {"step": 8}, keep=2, root=root)
    assert not partial.exists() and inner.exists()  # its own partial save goes


# -- two submissions racing ----------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("second", ["sweep", "sweep/b", ""], ids=["equal", "nested", "none"])
def test_two_submissions_racing_for_overlapping_folders_make_one_job(
    researcher, quota, node, api_token, monkeypatch, second
):
    """Both validated before either committed (the race the docs listed as not covered):
    the creating transaction locks the workspace's row and judges the folder again, so
    the second waits for the first and is refused with the same field error."""
    validated = threading.Barrier(2)
    real = api_jobs.submit_job

    def after_validation(**kwargs):
        validated.wait(timeout=30)  # both past validation, neither committed
        return real(**kwargs)

    monkeypatch.setattr(api_jobs, "submit_job", after_validation)

    def send(folder: str):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")
        return post(client, "/api/v1/jobs", {**GOOD, "checkpoint_dir": folder})

    results = run_together(lambda: send("sweep"), lambda: send(second))
    responses = [value for kind, value in results if kind == "ok"]
    assert len(responses) == 2, results
    codes = sorted(r.status_code for r in responses)
    if not second:  # no folder named: nothing to race for
        assert codes == [201, 201] and Job.objects.count() == 2
        return
    assert codes == [201, 400], [r.content[:300] for r in responses]
    (refused,) = [r for r in responses if r.status_code == 400]
    (made,) = Job.objects.all()
    error = error_of(refused, 400, "validation_error")
    assert error["field"] == "checkpoint_dir" and f"job #{made.pk}" in error["message"]


@pytest.mark.django_db
def test_a_batch_whose_folder_was_taken_meanwhile_names_the_item_and_creates_nothing(
    researcher, workspace, quota, node, monkeypatch
):
    real = submit_actions.create_jobs

    def taken_meanwhile(**kwargs):
        submit(researcher, workspace, quota, checkpoint_dir="sweep/b")  # another request's
        return real(**kwargs)

    monkeypatch.setattr(api_jobs, "create_jobs", taken_meanwhile)
    jobs = [
        {**GOOD, "name": "bad", "workers": 0},
        {**GOOD, "name": "a", "checkpoint_dir": "elsewhere"},
        {**GOOD, "name": "b", "checkpoint_dir": "sweep"},
    ]
    response = post(client_for(researcher), "/api/v1/jobs/batch", {"jobs": jobs})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == "jobs.2.checkpoint_dir"
    assert "This folder holds sweep/b" in error["message"]
    assert list(Job.objects.values_list("checkpoint_dir", flat=True)) == ["sweep/b"]


@pytest.mark.django_db
def test_the_create_page_shows_a_folder_taken_meanwhile_as_its_field_error(
    researcher, workspace, quota, node, client, monkeypatch
):
    real = web_forms.create_job

    def taken_meanwhile(**kwargs):
        submit(researcher, workspace, quota, checkpoint_dir="runs/exp")
        return real(**kwargs)

    monkeypatch.setattr(web_forms, "create_job", taken_meanwhile)
    client.force_login(researcher)
    form = FORM | {"quota": str(quota.pk), "checkpoint_dir": "runs/exp/inner"}
    response = client.post(reverse("web:create"), form)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "inside runs/exp" in " ".join(errors["checkpoint_dir"]), errors
    assert Job.objects.count() == 1
