"""Two runs never share a checkpoint folder unknowingly (docs/fault-tolerance.md,
"Checkpoint folders"): a folder another job of the workspace uses is refused at submission;
checkpoints recorded for another job are never listed or resumed from as this job's; a
Restart keeps the original's folder and resumes from its newest checkpoint."""

import pytest

from jobs.actions.progress import store_checkpoints
from jobs.actions.restarts import handle_hang
from jobs.actions.submit import resubmit_job
from jobs.models import Checkpoint, Job, Pod
from policy.statuses import JobStatus
from protocol.agent import CheckpointReport
from tests.api.conftest import GOOD, client_for, error_of, post
from tests.conftest import make_node
from tests.faulttolerance.conftest import make_ft_job

pytestmark = pytest.mark.django_db

AREA = "/var/lib/gpu-agent/checkpoints/ws-1"


def _reports(folder: str, steps, attempt: int = 1) -> list[CheckpointReport]:
    return [
        CheckpointReport(step=s, path=f"{AREA}/{folder}/step-{s}", attempt=attempt)
        for s in sorted(steps, reverse=True)
    ]


@pytest.fixture
def console_earlier(researcher, workspace, quota):
    """Job A ran in folder f7-0 on node n-a and saved steps 300-400 (attempt 1)."""
    job, (pod,) = make_ft_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[make_node("n-a")],
        checkpoint_dir="f7-0",
    )
    assert store_checkpoints(Pod.objects.get(pk=pod.pk), _reports("f7-0", [300, 350, 400]), None)
    return job


def test_a_folder_another_job_uses_is_refused_at_submission(console_earlier, researcher, node):
    response = post(client_for(researcher), "/api/v1/jobs", {**GOOD, "checkpoint_dir": "f7-0"})
    error = error_of(response, 400, "validation_error")
    assert error["field"] == "checkpoint_dir" and f"#{console_earlier.pk}" in error["message"]
    assert Job.objects.count() == 1


def test_another_jobs_default_folder_is_refused(researcher, workspace, quota, node):
    other = make_ft_job(owner=researcher, workspace=workspace, quota=quota, nodes=[node])[0]
    response = post(
        client_for(researcher), "/api/v1/jobs", {**GOOD, "checkpoint_dir": f"job-{other.pk}"}
    )
    assert error_of(response, 400, "validation_error")["field"] == "checkpoint_dir"


def test_a_free_folder_is_taken(console_earlier, researcher, node):
    response = post(client_for(researcher), "/api/v1/jobs", {**GOOD, "checkpoint_dir": "f7-1"})
    assert response.status_code == 201, response.content[:300]


def test_another_jobs_checkpoints_are_never_this_jobs(
    console_earlier, researcher, workspace, quota
):
    """Job B shares the folder anyway (submitted before the rule): its attempt 1 finds A's
    checkpoints in it; they are not B's, and B's restart does not resume from them."""
    job, (pod,) = make_ft_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[make_node("n-b")],
        checkpoint_dir="f7-0",
    )
    pod = Pod.objects.get(pk=pod.pk)
    assert store_checkpoints(pod, _reports("f7-0", [300, 350, 400]), None) == 0
    assert not Checkpoint.objects.filter(job=job).exists()
    # Its own save, found beside them, is its own.
    assert store_checkpoints(pod, _reports("f7-0", [100, 300, 350, 400]), None) == 1
    assert list(Checkpoint.objects.filter(job=job).values_list("step", flat=True)) == [100]
    handle_hang(Job.objects.get(pk=job.pk), "test")
    assert Job.objects.get(pk=job.pk).resume_from == f"{AREA}/f7-0/step-100"


def test_a_restart_keeps_the_folder_and_resumes_from_the_newest(console_earlier, researcher):
    Job.objects.filter(pk=console_earlier.pk).update(status=JobStatus.FAILED)
    clone = resubmit_job(Job.objects.get(pk=console_earlier.pk), user=researcher)
    assert clone.cloned_from_id == console_earlier.pk and clone.checkpoint_dir == "f7-0"
    assert clone.resume_from == f"{AREA}/f7-0/step-400"


def test_array_copies_get_a_folder_each(researcher, quota, node):
    body = {"count": 3, "job": {**GOOD, "checkpoint_dir": "sweep"}}
    response = post(client_for(researcher), "/api/v1/jobs/array", body)
    assert response.status_code == 201, response.content[:300]
    folders = sorted(Job.objects.values_list("checkpoint_dir", flat=True))
    assert folders == ["sweep/0", "sweep/1", "sweep/2"]
    again = post(client_for(researcher), "/api/v1/jobs/array", body)
    assert error_of(again, 400, "validation_error")["field"] == "job.checkpoint_dir"


def test_a_restart_through_the_api_keeps_an_explicit_folder(console_earlier, researcher, node):
    Job.objects.filter(pk=console_earlier.pk).update(status=JobStatus.FAILED)
    api = client_for(researcher)
    response = post(api, f"/api/v1/jobs/{console_earlier.pk}/restart")
    assert response.status_code == 201, response.content[:300]
    clone = Job.objects.get(cloned_from=console_earlier)
    assert clone.checkpoint_dir == "f7-0" and clone.resume_from.endswith("/f7-0/step-400")


def test_a_clone_on_the_page_starts_in_a_folder_of_its_own(console_earlier):
    from web.forms import initial_from_job

    assert initial_from_job(console_earlier)["checkpoint_dir"] == ""
