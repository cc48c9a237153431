"""A changed input refuses resume (docs/results.md, "Resume without duplicates"): a Restart
that declares other inputs than the run's identity recorded is refused while accepted units
would carry; the same inputs (or none given) restart as before.

Without the feature a Restart with new inputs carries the units made from the old ones."""

import pytest
from django.urls import reverse

from cli.__main__ import main as cli_main
from jobs.models import Job, ResultUnit, RunRecord
from policy.results import resume_refusal
from tests.agents.conftest import heartbeat, register
from tests.api.conftest import client_for, error_of, post
from tests.results.test_console import report, unit

CONTRACT = {"unit": "partition", "expected_units": "p{1..3}", "expected_items": 30}


def test_the_rule():
    assert resume_refusal("r-1", "v1", "v1", 3, "partitions") == ""
    assert resume_refusal("r-1", "v1", "v2", 0, "partitions") == ""  # nothing would carry
    refused = resume_refusal("r-1", "v1", "v2", 3, "partitions")
    assert refused.startswith(
        "resume refused: the inputs changed since run r-1 ('v1' → 'v2'); "
        "its 3 accepted partitions were made from the old inputs."
    )
    assert "none declared → 'v2'" in resume_refusal("r-1", "", "v2", 1, "units")


@pytest.fixture
def finished(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract={**CONTRACT, "inputs": "data-v1"})
    units = [unit("p1"), unit("p2"), unit("p3")]
    heartbeat(client, token, [report(pod, state="exited", units=units)])
    job.refresh_from_db()
    assert job.status == "Completed", job.status_reason
    assert RunRecord.objects.get(job=job).config["result_inputs"] == "data-v1"
    return job


def test_a_restart_with_changed_inputs_is_refused_and_creates_nothing(finished, researcher):
    api = client_for(researcher)
    path = f"/api/v1/jobs/{finished.pk}/restart"
    refused = error_of(post(api, path, {"result_inputs": "data-v2"}), 409, "resume_refused")
    assert refused["message"].startswith(
        f"Cannot restart: resume refused: the inputs changed since run {finished.run.run_id} "
        "('data-v1' → 'data-v2'); its 3 accepted partitions were made from the old inputs."
    )
    assert not Job.objects.filter(cloned_from=finished).exists()
    bad = error_of(post(api, path, {"result_inputs": "a\nb"}), 400, "validation_error")
    assert bad["field"] == "result_inputs"
    error_of(post(api, path, {"inputs": "x"}), 400, "validation_error")


@pytest.mark.parametrize("body", [None, {"result_inputs": "data-v1"}])
def test_a_restart_with_the_same_inputs_carries_the_units(finished, researcher, body):
    response = post(client_for(researcher), f"/api/v1/jobs/{finished.pk}/restart", body)
    assert response.status_code == 201, response.content[:300]
    clone = Job.objects.get(cloned_from=finished)
    assert clone.result_contract["inputs"] == "data-v1"
    assert ResultUnit.objects.filter(job=clone).count() == 3


@pytest.mark.django_db(transaction=True)
def test_the_command_line_says_why_a_restart_is_refused(finished, live_server, api_token, capsys):
    argv = ["--url", live_server.url, "--token", api_token, "restart", str(finished.pk)]
    assert cli_main([*argv, "--inputs", "data-v2"]) != 0
    said = capsys.readouterr()
    assert "resume refused: the inputs changed" in said.out + said.err
    assert cli_main([*argv, "--inputs", "data-v1"]) == 0
    assert f"job {finished.pk} restarted as job" in capsys.readouterr().out


def test_start_from_scratch_after_a_refusal_resumes_and_carries_nothing(finished, researcher):
    """The way out of a refusal: a new job in a folder of its own, no checkpoint to resume,
    no unit carried; the original keeps its folder and its accepted result."""
    api = client_for(researcher)
    path = f"/api/v1/jobs/{finished.pk}/restart"
    error_of(post(api, path, {"result_inputs": "data-v2"}), 409, "resume_refused")
    response = post(api, path, {"result_inputs": "data-v2", "from_scratch": True})
    assert response.status_code == 201, response.content[:300]
    clone = Job.objects.get(cloned_from=finished)
    assert response.json()["id"] == clone.pk
    assert clone.result_contract["inputs"] == "data-v2"
    assert clone.checkpoint_dir == "" and clone.resume_from == ""  # its folder: job-<id>
    assert not ResultUnit.objects.filter(job=clone).exists()
    assert ResultUnit.objects.filter(job=finished).count() == 3
    assert finished.events.filter(reason=f"restarted from scratch as job #{clone.pk}").exists()
    bad = error_of(post(api, path, {"from_scratch": "yes"}), 400, "validation_error")
    assert bad["field"] == "from_scratch"


def test_start_from_scratch_leaves_a_named_folder_to_the_original(client, ft_job, researcher):
    node, token = register(client)
    job, (pod,) = ft_job([node], checkpoint_dir="campaign-a", result_contract=CONTRACT)
    heartbeat(client, token, [report(pod, state="exited", units=[unit("p1")])])
    response = post(
        client_for(researcher), f"/api/v1/jobs/{job.pk}/restart", {"from_scratch": True}
    )
    assert response.status_code == 201, response.content[:300]
    clone = Job.objects.get(cloned_from=job)
    assert clone.checkpoint_dir == ""
    assert not ResultUnit.objects.filter(job=clone).exists()


def test_the_job_page_restarts_from_scratch(finished, researcher, client, outsider):
    client.force_login(outsider)
    url = reverse("web:restart", args=[finished.pk])
    assert client.post(url, {"from_scratch": "1"}).status_code == 404
    assert not Job.objects.filter(cloned_from=finished).exists()
    client.force_login(researcher)
    page = client.get(reverse("web:detail", args=[finished.pk])).text
    assert "Restart from scratch" in page and 'name="from_scratch" value="1"' in page
    response = client.post(url, {"from_scratch": "1"})
    clone = Job.objects.get(cloned_from=finished)
    assert response["Location"] == reverse("web:detail", args=[clone.pk])
    assert clone.checkpoint_dir == "" and clone.resume_from == ""
    assert not ResultUnit.objects.filter(job=clone).exists()


@pytest.mark.django_db(transaction=True)
def test_the_command_line_starts_from_scratch(finished, live_server, api_token, capsys):
    argv = ["--url", live_server.url, "--token", api_token, "restart", str(finished.pk)]
    assert cli_main([*argv, "--inputs", "data-v2", "--from-scratch"]) == 0
    clone = Job.objects.get(cloned_from=finished)
    assert f"job {finished.pk} restarted from scratch as job {clone.pk}" in capsys.readouterr().out
    assert clone.result_contract["inputs"] == "data-v2"
    assert not ResultUnit.objects.filter(job=clone).exists()


def test_a_stopped_run_names_the_units_complete_at_stop(client, ft_job, researcher):
    """A graceful stop keeps whole units: the result says which were complete at stop."""
    contract = {"unit": "partition", "expected_units": "p{1..8}", "expected_items": 80}
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract=contract)
    units = [unit(f"p{i}") for i in range(1, 6)]
    heartbeat(client, token, [report(pod, units=units)])
    api = client_for(researcher)
    assert post(api, f"/api/v1/jobs/{job.pk}/stop").status_code == 200
    heartbeat(client, token, [report(pod, state="exited") | {"exit_code": 143}])
    job.refresh_from_db()
    assert job.status == "Stopped", job.status_reason
    found = api.get(f"/api/v1/jobs/{job.pk}/result").json()
    assert found["state"] == "unchecked"
    assert found["reason"] == (
        "not judged: the job ended Stopped with 5 partitions complete (p1..p5); "
        "a Restart carries them; not done: p6..p8"
    )
    client.force_login(researcher)
    page = client.get(reverse("web:detail", args=[job.pk])).text
    assert "5 partitions complete (p1..p5)" in page
