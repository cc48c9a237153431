"""The log of a worker that does not exist and never will is 404 (the raw download, the log
page, the viewer's JSON and the API), not an empty 200; a worker not placed yet is not
missing (a follower waits for its lines)."""

import pytest
from django.urls import reverse

from jobs.actions.stop import request_stop
from jobs.logview import missing_worker
from policy.statuses import JobStatus
from tests.web.conftest import add_log, place, submit

WEB_VIEWS = ["web:logs-raw", "web:logs"]


@pytest.mark.parametrize(
    ("rank", "attempt", "found", "workers", "job_attempt", "final", "why"),
    [
        (0, None, True, 1, 1, False, ""),
        (0, None, False, 1, 1, False, ""),  # waiting: not placed yet
        (1, 2, False, 2, 2, False, ""),  # the current attempt, not placed yet
        (2, None, False, 2, 1, False, "The job has 2 workers: no rank 2."),
        (1, None, False, 1, 1, True, "The job has 1 worker: no rank 1."),
        (0, 3, False, 1, 2, False, "The job's newest attempt is 2: no attempt 3."),
        (1, 1, False, 2, 2, False, "Worker 1 did not run in attempt 1."),
        (0, None, False, 1, 1, True, "Worker 0 never ran: the job ended before it was placed."),
        (0, 1, False, 1, 1, True, "Worker 0 never ran: the job ended before it was placed."),
        (0, 1, True, 1, 1, True, ""),
    ],
)
def test_which_workers_are_missing(rank, attempt, found, workers, job_attempt, final, why):
    got = missing_worker(
        rank=rank,
        attempt=attempt,
        found=found,
        workers=workers,
        job_attempt=job_attempt,
        final=final,
    )
    assert got == why


@pytest.mark.parametrize(
    ("final", "why"),
    [(False, ""), (True, "")],  # the job's log, no worker named: empty, never missing
)
def test_the_jobs_log_without_a_worker_named_is_never_missing(final, why):
    got = missing_worker(
        rank=0, attempt=None, found=False, workers=1, job_attempt=1, final=final, named=False
    )
    assert got == why


@pytest.fixture
def running(job, node):
    pod = place(job, node)[0]
    add_log(pod, 0, ["hello"])
    return job


@pytest.mark.parametrize("name", WEB_VIEWS)
@pytest.mark.parametrize("query", ["?rank=1", "?rank=0&attempt=2", "?rank=7&attempt=1"])
def test_a_page_of_a_worker_that_does_not_exist_is_404(member_client, running, name, query):
    response = member_client.get(reverse(name, args=[running.pk]) + query)
    assert response.status_code == 404
    assert "Not found" in response.text  # the console's page, not an empty download


@pytest.mark.parametrize("query", ["?rank=1&format=json", "?attempt=2&format=json"])
def test_the_viewers_json_of_a_missing_worker_is_404(member_client, running, query):
    assert member_client.get(reverse("web:logs", args=[running.pk]) + query).status_code == 404


@pytest.mark.parametrize("name", WEB_VIEWS)
def test_a_worker_that_exists_is_still_served(member_client, running, name):
    response = member_client.get(reverse(name, args=[running.pk]) + "?rank=0&attempt=1")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"hello" in body


def test_a_job_that_ended_before_it_was_placed_has_no_log(member_client, api, job, researcher):
    """Its worker named is missing (404); the job's log itself is empty, and complete."""
    request_stop(job, user=researcher)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    for name in WEB_VIEWS:
        assert member_client.get(reverse(name, args=[job.pk]) + "?rank=0").status_code == 404
    response = api.get(f"/api/v1/jobs/{job.pk}/logs?rank=0")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    response = api.get(f"/api/v1/jobs/{job.pk}/logs")
    assert response.status_code == 200 and response.json()["lines"] == []
    assert response.json()["complete"] is True


def test_the_api_answers_404_for_a_worker_that_never_runs(api, running):
    response = api.get(f"/api/v1/jobs/{running.pk}/logs?rank=3")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "not_found" and "no rank 3" in error["message"]
    assert api.get(f"/api/v1/jobs/{running.pk}/logs?attempt=5").status_code == 404
    lines = api.get(f"/api/v1/jobs/{running.pk}/logs").json()["lines"]
    assert [line["text"] for line in lines] == ["hello"]


def test_a_waiting_jobs_worker_is_not_missing(api, member_client, researcher, workspace, quota):
    waiting = submit(researcher, workspace, quota)
    response = api.get(f"/api/v1/jobs/{waiting.pk}/logs")
    assert response.status_code == 200 and response.json()["lines"] == []
    assert member_client.get(reverse("web:logs-raw", args=[waiting.pk])).status_code == 200
