"""An exclusive output folder per run (issue 32, item 2; docs/results.md): a job may declare
`result_output_dir`, a folder of its workspace's area that becomes its run's result folder.
It is claimed like a checkpoint folder (docs/fault-tolerance.md, "Checkpoint folders"):
refused with a field error naming the other job and its folder when it equals any job's
checkpoint or output folder, or lies inside or around a live job's or one holding committed
checkpoints or accepted units; both ways (output against checkpoint and back); in the API,
the create page, batches and arrays; nothing is created on a refusal. A Restart keeps it,
"Restart from scratch" and Clone do not. Without the feature the field did not exist and a
result always lay in the checkpoint folder."""

import threading

import pytest
from django.test import Client
from django.urls import reverse

from agents.heartbeat.actions import worker_spec
from api import jobs as api_jobs
from jobs.folders import claim_folders, output_dir_of
from jobs.models import Job, Pod, ResultUnit
from policy.folders import Claim, Overlap, conflict
from policy.jobspec import JobSpec, fields_of_job
from policy.statuses import JobStatus
from protocol.agent import job_problems
from tests.api.conftest import GOOD, client_for, error_of, post
from tests.scheduler.threads import run_together
from tests.web.conftest import submit
from tests.web.test_create_page import FORM

# -- the pure rule ------------------------------------------------------------------------


def test_output_and_checkpoint_claims_are_judged_against_each_other_both_ways():
    theirs = [Claim("runs/a", "checkpoint", 2), Claim("results/a", "output", 2)]
    inside = conflict(Claim("runs/a/out", "output", 9), theirs)
    assert inside is not None and (inside.claim.job, inside.overlap) == (2, Overlap.INSIDE)
    assert inside.message().startswith("This folder is inside runs/a, which job #2 uses:")
    assert "taken for the other's result" in inside.message()
    around = conflict(Claim("results", "checkpoint", 9), theirs)
    assert around is not None and around.overlap == Overlap.ENCLOSES
    assert "holds results/a, which job #2 uses for its result" in around.message()
    equal = conflict(Claim("results/a", "output", 9), theirs)
    assert equal is not None and equal.message().startswith(
        "Job #2 already uses this folder for its result:"
    )
    assert equal.message().endswith("or Restart job #2 to continue its result.")
    mixed = conflict(Claim("runs/a", "output", 9), theirs)
    assert mixed is not None and mixed.message().endswith("Choose another folder.")
    # A job's own checkpoint and output folders never conflict with each other.
    assert conflict(Claim("runs/a/result", "output", 2), theirs) is None
    assert conflict(Claim("runs/b", "output", 9), theirs) is None


def test_the_field_is_checked_like_a_checkpoint_folder_and_carried_to_the_agent():
    base = {"quota": "q", "image": "i", "command": "c"}
    for bad in ("../x", "runs/../x", "/abs", "a b", "x" * 501):
        assert "result_output_dir" in JobSpec.from_json(base | {"result_output_dir": bad})[1]
    spec, problems = JobSpec.from_json(base | {"result_output_dir": "results/run-1/"})
    assert problems == {} and output_dir_of(spec) == "results/run-1"
    assert spec.to_json()["result"]["output_dir"] == "results/run-1"
    assert spec.worker_fields()["output_subdir"] == "results/run-1"
    assert spec.to_fields(clone=True)["result_output_dir"] == ""  # a clone's is its own
    assert job_problems(image="i", command="c", output_subdir="a/../b")


# -- the API --------------------------------------------------------------------------------


def submit_api(researcher, **fields):
    return post(client_for(researcher), "/api/v1/jobs", {**GOOD, **fields})


@pytest.fixture
def outer(researcher, workspace, quota):
    """A live job checkpointing to runs/exp, its result declared in results/exp."""
    return submit(
        researcher, workspace, quota, checkpoint_dir="runs/exp",
        result_contract={"output_dir": "results/exp"},
    )  # fmt: skip


@pytest.mark.django_db
def test_a_declared_folder_is_shown_in_the_jobs_json_and_on_its_page(
    researcher, quota, node, client
):
    response = submit_api(researcher, result_output_dir="results/mine")
    assert response.status_code == 201, response.content[:500]
    body = response.json()
    assert body["result"]["output_dir"] == "results/mine"
    job = Job.objects.get(pk=body["id"])
    assert output_dir_of(job) == "results/mine"
    shown = client_for(researcher).get(f"/api/v1/jobs/{job.pk}").json()
    assert shown["result"]["output_dir"] == "results/mine"
    client.force_login(researcher)
    page = client.get(reverse("web:detail", args=[job.pk])).content.decode()
    assert "<code>results/mine</code> (declared" in page
    plain = submit_api(researcher).json()
    assert plain["result"]["output_dir"] == ""
    page = client.get(reverse("web:detail", args=[plain["id"]])).content.decode()
    assert "<code>output/result</code> in the checkpoint folder" in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        (
            {"result_output_dir": "results/exp"},
            "result_output_dir",
            "uses this folder for its result",
        ),
        ({"result_output_dir": "results/exp/x"}, "result_output_dir", "inside results/exp"),
        ({"result_output_dir": "results"}, "result_output_dir", "holds results/exp"),
        ({"result_output_dir": "runs/exp"}, "result_output_dir", "already uses this folder"),
        ({"result_output_dir": "runs/exp/out"}, "result_output_dir", "inside runs/exp"),
        ({"result_output_dir": "runs"}, "result_output_dir", "holds runs/exp"),
        ({"checkpoint_dir": "results/exp"}, "checkpoint_dir", "uses this folder for its result"),
        ({"checkpoint_dir": "results/exp/ck"}, "checkpoint_dir", "inside results/exp"),
        ({"checkpoint_dir": "results"}, "checkpoint_dir", "holds results/exp"),
    ],
)
def test_a_folder_overlapping_another_jobs_is_refused_and_nothing_is_created(
    outer, researcher, node, fields, field, words
):
    error = error_of(submit_api(researcher, **fields), 400, "validation_error")
    assert error["field"] == field
    assert words in error["message"] and f"job #{outer.pk}" in error["message"].lower()
    assert list(Job.objects.values_list("pk", flat=True)) == [outer.pk]


@pytest.mark.django_db
def test_siblings_and_the_jobs_own_folders_are_free(outer, researcher, node):
    assert submit_api(researcher, result_output_dir="results/exp2").status_code == 201
    own = submit_api(researcher, checkpoint_dir="mine", result_output_dir="mine/result")
    assert own.status_code == 201, own.content[:300]
    same = submit_api(researcher, checkpoint_dir="both", result_output_dir="both")
    assert same.status_code == 201, same.content[:300]


@pytest.mark.django_db
def test_another_jobs_default_checkpoint_folder_is_claimed(researcher, workspace, quota, node):
    other = submit(researcher, workspace, quota)  # checkpoints to its default job-<id>
    error = error_of(
        submit_api(researcher, result_output_dir=f"job-{other.pk}"), 400, "validation_error"
    )
    assert error["field"] == "result_output_dir" and f"job #{other.pk}" in error["message"].lower()


@pytest.mark.django_db
def test_a_finished_jobs_output_counts_only_while_it_holds_accepted_units(outer, researcher, node):
    Job.objects.filter(pk=outer.pk).update(status=JobStatus.COMPLETED)
    assert submit_api(researcher, result_output_dir="results/exp/x").status_code == 201
    Job.objects.exclude(pk=outer.pk).delete()
    ResultUnit.objects.create(
        job=outer, unit="p1", digest="c" * 64, attempt=1, accepted_at="2026-01-01T00:00:00Z"
    )
    error = error_of(
        submit_api(researcher, checkpoint_dir="results/exp/x"), 400, "validation_error"
    )
    assert "inside results/exp, which job" in error["message"]
    # Equal is refused whatever the other job holds.
    ResultUnit.objects.filter(job=outer).delete()
    error = error_of(
        submit_api(researcher, result_output_dir="results/exp"), 400, "validation_error"
    )
    assert error["field"] == "result_output_dir"


@pytest.mark.django_db
def test_the_second_of_two_batch_items_claiming_overlapping_folders_is_refused_alone(
    researcher, quota, node
):
    jobs = [
        {**GOOD, "name": "a", "result_output_dir": "sweep"},
        {**GOOD, "name": "b", "checkpoint_dir": "sweep/b"},
        {**GOOD, "name": "c", "result_output_dir": "sweep"},
        {**GOOD, "name": "d", "checkpoint_dir": "elsewhere", "result_output_dir": "out/d"},
        {**GOOD, "name": "e", "result_output_dir": "out"},
    ]
    response = post(client_for(researcher), "/api/v1/jobs/batch", {"jobs": jobs})
    assert response.status_code == 201, response.content[:500]
    body = response.json()
    assert [j["name"] for j in body["jobs"]] == ["a", "d"]
    errors = {e["index"]: e["error"] for e in body["errors"]}
    assert sorted(errors) == [1, 2, 4]
    assert errors[1]["field"] == "checkpoint_dir"
    assert (
        "inside sweep, which an earlier job of this batch (a) uses for its result"
        in (errors[1]["message"])
    )
    assert errors[2]["field"] == "result_output_dir"
    assert (
        "An earlier job of this batch (a) already uses this folder for its result"
        in (errors[2]["message"])
    )
    assert errors[4]["field"] == "result_output_dir" and "holds out/d" in errors[4]["message"]
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_a_batch_whose_output_folder_was_taken_meanwhile_names_the_field(
    researcher, workspace, quota, node
):
    """The creating transaction judges the folders again (jobs.folders.claim_folders)."""
    submit(researcher, workspace, quota, result_contract={"output_dir": "taken"})
    from jobs.folders import FolderRaced

    with pytest.raises(FolderRaced) as raised:
        claim_folders([(workspace.pk, "mine", ""), (workspace.pk, "", "taken/x")])
    assert (raised.value.index, raised.value.field) == (1, "result_output_dir")
    assert "inside taken, which job" in str(raised.value)


@pytest.mark.django_db
def test_array_copies_get_an_output_folder_each(outer, researcher, node):
    body = {"count": 3, "job": {**GOOD, "result_output_dir": "sweep-out"}}
    response = post(client_for(researcher), "/api/v1/jobs/array", body)
    assert response.status_code == 201, response.content[:500]
    made = [j["result"]["output_dir"] for j in response.json()["jobs"]]
    assert made == ["sweep-out/0", "sweep-out/1", "sweep-out/2"]
    for base, field in (("results/exp/sweep", "result_output_dir"), ("runs", "result_output_dir")):
        body = {"count": 2, "job": {**GOOD, "result_output_dir": base}}
        response = post(client_for(researcher), "/api/v1/jobs/array", body)
        assert error_of(response, 400, "validation_error")["field"] == f"job.{field}"
    # A copy's output folder inside another copy's checkpoint folder: one of them is refused.
    body = {"count": 2, "job": {**GOOD, "checkpoint_dir": "ck", "result_output_dir": "ck/1"}}
    error = error_of(
        post(client_for(researcher), "/api/v1/jobs/array", body), 400, "validation_error"
    )
    assert error["field"] == "job.checkpoint_dir"  # copy 1's ck/1 holds copy 0's ck/1/0
    assert "ck/1: This folder holds ck/1/0, which copy 0 uses for its result" in error["message"]
    body = {"count": 10, "job": {**GOOD, "result_output_dir": "/".join(["x" * 99] * 5)}}
    error = error_of(
        post(client_for(researcher), "/api/v1/jobs/array", body), 400, "validation_error"
    )
    assert error["field"] == "job.result_output_dir" and "too long" in error["message"]
    assert Job.objects.count() == 4


# -- the create page ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_create_page_takes_the_folder_and_shows_its_field_errors(
    outer, researcher, quota, node, client
):
    client.force_login(researcher)
    form = FORM | {"quota": str(quota.pk), "gpus_per_worker": "1"}
    page = client.get(reverse("web:create")).content.decode()
    assert 'name="result_output_dir"' in page
    for bad, words in (("../up", "no &#x27;..&#x27;"), ("results/exp/x", "inside results/exp")):
        response = client.post(reverse("web:create"), form | {"result_output_dir": bad})
        assert response.status_code == 200
        assert words in response.content.decode()
        assert response.context["form"].errors["result_output_dir"]
    assert Job.objects.count() == 1
    response = client.post(reverse("web:create"), form | {"result_output_dir": "results/new"})
    assert response.status_code == 302
    assert output_dir_of(Job.objects.latest("pk")) == "results/new"


# -- Restart, Restart from scratch, Clone ---------------------------------------------------


@pytest.mark.django_db
def test_a_restart_keeps_the_output_folder_from_scratch_and_clone_do_not(
    outer, researcher, node, client
):
    Job.objects.filter(pk=outer.pk).update(status=JobStatus.COMPLETED)
    ResultUnit.objects.create(
        job=outer, unit="p1", digest="c" * 64, attempt=1, accepted_at="2026-01-01T00:00:00Z"
    )
    api = client_for(researcher)
    restarted = post(api, f"/api/v1/jobs/{outer.pk}/restart")
    assert restarted.status_code == 201, restarted.content[:300]
    again = Job.objects.get(pk=restarted.json()["id"])
    assert (again.checkpoint_dir, output_dir_of(again)) == ("runs/exp", "results/exp")
    assert ResultUnit.objects.filter(job=again).count() == 1  # the same result, carried
    Job.objects.filter(pk=again.pk).update(status=JobStatus.COMPLETED)

    fresh = post(api, f"/api/v1/jobs/{outer.pk}/restart", {"from_scratch": True})
    assert fresh.status_code == 201, fresh.content[:300]
    scratch = Job.objects.get(pk=fresh.json()["id"])
    assert (scratch.checkpoint_dir, output_dir_of(scratch)) == ("", "")
    assert not ResultUnit.objects.filter(job=scratch).exists()

    assert fields_of_job(outer)["result_output_dir"] == ""
    client.force_login(researcher)
    page = client.get(reverse("web:create") + f"?clone={outer.pk}")
    assert page.context["form"]["result_output_dir"].value() in ("", None)


@pytest.mark.django_db
def test_the_worker_spec_carries_the_declared_folder(ft_job):
    job, (pod,) = ft_job(result_contract={"output_dir": "results/exp"})
    pod = Pod.objects.select_related("job").get(pk=pod.pk)
    assert worker_spec(pod).output_subdir == "results/exp"
    Job.objects.filter(pk=job.pk).update(result_contract={})  # a job from before the field
    pod = Pod.objects.select_related("job").get(pk=pod.pk)
    assert worker_spec(pod).output_subdir == ""


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_submissions_racing_for_one_output_folder_make_one_job(
    researcher, quota, node, api_token, monkeypatch
):
    """Both validated before either committed: the creating transaction locks the
    workspace's row and judges the folders again (jobs.folders.claim_folders)."""
    validated = threading.Barrier(2)
    real = api_jobs.submit_job

    def after_validation(**kwargs):
        validated.wait(timeout=30)  # both past validation, neither committed
        return real(**kwargs)

    monkeypatch.setattr(api_jobs, "submit_job", after_validation)

    def send(fields: dict):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")
        return post(client, "/api/v1/jobs", {**GOOD, **fields})

    results = run_together(
        lambda: send({"result_output_dir": "shared"}), lambda: send({"checkpoint_dir": "shared/x"})
    )
    responses = [value for kind, value in results if kind == "ok"]
    assert sorted(r.status_code for r in responses) == [201, 400], results
    (refused,) = [r for r in responses if r.status_code == 400]
    (made,) = Job.objects.all()
    error = error_of(refused, 400, "validation_error")
    assert error["field"] in ("result_output_dir", "checkpoint_dir")
    assert f"job #{made.pk}" in error["message"]
