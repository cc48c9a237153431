"""The researcher API: bearer tokens, access, error shape, list, logs, stop, restart."""

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.actions import issue_api_token
from jobs.actions.transitions import transition
from jobs.models import Job, Pod
from policy.statuses import Actor, JobStatus, PodStatus
from tests.conftest import make_node
from tests.web.conftest import add_log, finish, place, submit

JOB_ENDPOINTS = [
    ("get", "api:job"),
    ("get", "api:job-logs"),
    ("post", "api:job-stop"),
    ("post", "api:job-restart"),
]


def _client(user) -> Client:
    _, plain = issue_api_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {plain}")


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert {"code", "message", "field"} <= set(body["error"])
    assert body["error"]["code"] == code
    return body["error"]


# Authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Basic YWxpY2U6cGFzcw==",
        "Bearer not-a-token",
        "Bearer gqc_deadbeef_wrongsecret",
        "Bearer gqn_deadbeef_wrongkind",
    ],
)
def test_missing_or_bad_token_is_401(db, job, header):
    client = Client(HTTP_AUTHORIZATION=header) if header else Client()
    response = client.get(reverse("api:jobs"))
    _error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_right_prefix_wrong_secret_is_401(db, researcher):
    _token, plain = issue_api_token(researcher)
    forged = plain[:-4] + ("aaaa" if not plain.endswith("aaaa") else "bbbb")
    response = Client(HTTP_AUTHORIZATION=f"Bearer {forged}").get(reverse("api:jobs"))
    _error(response, 401, "not_authenticated")


def test_revoked_token_is_401(db, researcher):
    token, plain = issue_api_token(researcher)
    token.revoked_at = timezone.now()
    token.save()
    response = Client(HTTP_AUTHORIZATION=f"Bearer {plain}").get(reverse("api:jobs"))
    _error(response, 401, "not_authenticated")


def test_a_session_authenticates_the_api_but_writes_need_its_csrf_token(researcher, job):
    """The docs' "Try it out" in the signed-in browser (tests/api/test_session_docs.py)."""
    session = Client(enforce_csrf_checks=True)
    session.force_login(researcher)
    assert session.get(reverse("api:jobs")).status_code == 200
    stop = session.post(reverse("api:job-stop", args=[job.pk]))
    _error(stop, 403, "permission_denied")


@pytest.mark.parametrize(("method", "name"), JOB_ENDPOINTS)
def test_anonymous_job_endpoints_are_401(client, job, method, name):
    _error(getattr(client, method)(reverse(name, args=[job.pk])), 401, "not_authenticated")


def test_last_used_is_written_at_most_once_a_minute(db, researcher):
    token, plain = issue_api_token(researcher)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {plain}")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        client.get(reverse("api:jobs"))
        token.refresh_from_db()
        assert token.last_used_at == start
        clock.shift(timedelta(seconds=30))
        with CaptureQueriesContext(connection) as ctx:
            client.get(reverse("api:jobs"))
        assert not [q for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]
        token.refresh_from_db()
        assert token.last_used_at == start
        clock.shift(timedelta(seconds=31))
        client.get(reverse("api:jobs"))
        token.refresh_from_db()
        assert token.last_used_at == start + timedelta(seconds=61)


# Access -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "name"), JOB_ENDPOINTS)
def test_outsider_gets_404_in_the_error_shape(outsider, job, method, name):
    response = getattr(_client(outsider), method)(reverse(name, args=[job.pk]))
    _error(response, 404, "not_found")
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and Job.objects.count() == 1


def test_colleague_sees_and_stops_a_job(colleague, job):
    client = _client(colleague)
    assert client.get(reverse("api:job", args=[job.pk])).json()["id"] == job.pk
    response = client.post(reverse("api:job-stop", args=[job.pk]))
    assert response.status_code == 200 and response.json()["status"] == "Stopped"


def test_list_shows_only_the_users_workspaces(api, outsider, job, other_quota, other_workspace):
    theirs = submit(outsider, other_workspace, other_quota, name="theirs")
    assert [j["id"] for j in api.get(reverse("api:jobs")).json()["jobs"]] == [job.pk]
    mine = _client(outsider).get(reverse("api:jobs")).json()["jobs"]
    assert [j["id"] for j in mine] == [theirs.pk]


@pytest.mark.parametrize(
    ("method", "name", "args"),
    [
        ("put", "api:jobs", False),
        ("delete", "api:jobs", False),
        ("post", "api:job", True),
        ("delete", "api:job", True),
        ("post", "api:job-logs", True),
        ("get", "api:job-stop", True),
        ("get", "api:job-restart", True),
        ("post", "api:nodes", False),
    ],
)
def test_wrong_method_is_405_in_the_error_shape(api, job, method, name, args):
    response = getattr(api, method)(reverse(name, args=[job.pk] if args else []))
    _error(response, 405, "method_not_allowed")
    assert response["Allow"]


def test_unknown_paths_and_ids_are_404_in_the_error_shape(api, db):
    _error(api.get("/api/v1/nope"), 404, "not_found")
    _error(api.get("/api/v1/jobs/424242"), 404, "not_found")
    _error(api.get("/api/v1/jobs/99999999999999999999999"), 404, "not_found")


def test_trailing_slash_is_optional(api, job):
    assert api.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert api.get("/api/v1/jobs/").status_code == 200


# Job JSON ----------------------------------------------------------------------------------


def test_job_json_status_follows_the_workers_it_shows(job, node):
    """The job row (and its `has_unknown_worker` annotation) is read before its pods: a
    worker that went Unknown between the two reads must not show Unknown in the workers
    and Running in the status (a loaded CI run saw exactly that)."""
    from api.serializers import job_json

    pods = place(job, node)
    read_before = Job.objects.get(pk=job.pk)
    read_before.has_unknown_worker = False  # as annotated before the pod went Unknown
    Pod.objects.filter(pk=pods[0].pk).update(status=PodStatus.UNKNOWN)
    data = job_json(read_before, Pod.objects.filter(job=job).select_related("node"))
    assert data["pods"][0]["status"] == "Unknown"
    assert data["display_status"] == "Unknown (node not reachable)"


def test_job_json_with_pods(api, job, node):
    pods = place(job, node)
    Pod.objects.filter(pk=pods[0].pk).update(status=PodStatus.UNKNOWN, in_quota=False)
    data = api.get(reverse("api:job", args=[job.pk])).json()
    expected_keys = {
        "id", "name", "workspace", "quota", "owner", "image", "command", "workers",
        "gpus_per_worker", "cpus_per_worker", "memory_gb_per_worker", "priority",
        "idle_resources", "status", "display_status", "status_reason", "queue_position",
        "attempt", "restart_count", "exit_code", "created_at", "started_at", "finished_at",
        "cloned_from", "pods",
    }  # fmt: skip
    assert expected_keys <= set(data)
    assert data["status"] == "Running"
    assert data["display_status"] == "Unknown (node not reachable)"
    assert data["pods"] == [
        {
            "rank": 0,
            "attempt": 1,
            "node": "node-0",
            "gpu_indices": [0],
            "gpu_uuids": [],
            "charged_quota": "team-a",
            "in_quota": False,
            "status": "Unknown",
            "status_reason": "",
            "exit_code": None,
            "progress": None,
            "report_refused": "",
            "report_refused_at": None,
            "role": "worker",  # a generic job's workers (docs/distributed.md)
        }
    ]


# List -------------------------------------------------------------------------------------


def test_list_is_newest_first_with_cursor_pagination(api, researcher, workspace, quota, node):
    ids = [submit(researcher, workspace, quota, name=f"j{i}").pk for i in range(7)]
    seen, cursor = [], None
    while True:
        url = reverse("api:jobs") + "?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(url).json()
        seen += [j["id"] for j in page["jobs"]]
        assert "pods" not in (page["jobs"] or [{}])[0]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


def test_list_filters_by_status(api, researcher, workspace, quota, node):
    running = submit(researcher, workspace, quota)
    place(running, node)
    submit(researcher, workspace, quota)
    jobs = api.get(reverse("api:jobs") + "?status=Running").json()["jobs"]
    assert [j["id"] for j in jobs] == [running.pk]
    both = api.get(reverse("api:jobs") + "?status=Running,Pending").json()["jobs"]
    assert len(both) == 2


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=201", "limit"), ("limit=x", "limit"),
     ("status=Sleeping", "status"), ("cursor=garbage", "cursor")],
)  # fmt: skip
def test_list_rejects_bad_parameters(api, job, query, field):
    error = _error(api.get(reverse("api:jobs") + "?" + query), 400, "validation_error")
    assert error["field"] == field


def test_list_queries_do_not_grow_with_jobs(
    api, researcher, workspace, quota, node, django_assert_num_queries
):
    place(submit(researcher, workspace, quota), node)
    submit(researcher, workspace, quota, name="waiting")  # its expected start is forecast
    api.get(reverse("api:jobs"))  # the token's last_used_at write happens once
    with CaptureQueriesContext(connection) as ctx:
        assert api.get(reverse("api:jobs")).status_code == 200
    one = len(ctx.captured_queries)
    other = make_node("node-1")
    for i in range(19):
        job = submit(researcher, workspace, quota, name=f"j{i}")
        if i % 3 == 0:
            place(job, other)
    with django_assert_num_queries(one):
        assert len(api.get(reverse("api:jobs")).json()["jobs"]) == 21


def test_nodes_list_shows_gpu_usage(api, job, node):
    place(job, node)
    make_node("idle-node", gpus=4)
    data = api.get(reverse("api:nodes")).json()["nodes"]
    assert [(n["name"], n["state"], n["gpus"], n["used_gpus"]) for n in data] == [
        ("idle-node", "Ready", 4, 0),
        ("node-0", "Ready", 8, 1),
    ]


# Logs -------------------------------------------------------------------------------------


def test_logs_page_through_with_after(api, job, node):
    pod = place(job, node)[0]
    add_log(pod, 0, ["a", "b", "c"])
    add_log(pod, 3, ["\x1b[1md\x1b[0m", "<e>"])
    url = reverse("api:job-logs", args=[job.pk])
    first = api.get(url + "?limit=2").json()
    assert [(x["seq"], x["text"]) for x in first["lines"]] == [(0, "a"), (1, "b")]
    assert first["lines"][0]["rank"] == 0 and first["lines"][0]["attempt"] == 1
    assert first["next_after"] == 1 and first["complete"] is False
    rest = api.get(url + f"?after={first['next_after']}").json()
    # JSON carries the raw text; escaping is for HTML, stripping for display.
    assert [x["text"] for x in rest["lines"]] == ["c", "\x1b[1md\x1b[0m", "<e>"]
    assert rest["next_after"] == 4
    empty = api.get(url + "?after=4").json()
    assert empty["lines"] == [] and empty["next_after"] == 4


def test_logs_complete_once_final_and_settled(api, job, node):
    with time_machine.travel(timezone.now() - timedelta(hours=1), tick=False):
        finish(job, node)
    data = api.get(reverse("api:job-logs", args=[job.pk])).json()
    assert data["complete"] is True


def test_logs_of_a_job_without_workers(api, job):
    data = api.get(reverse("api:job-logs", args=[job.pk])).json()
    assert data["lines"] == [] and data["complete"] is False


@pytest.mark.parametrize("query", ["after=x", "limit=0", "limit=5001", "rank=-1", "attempt=0"])
def test_logs_reject_bad_parameters(api, job, query):
    url = reverse("api:job-logs", args=[job.pk]) + "?" + query
    _error(api.get(url), 400, "validation_error")


# Stop and restart --------------------------------------------------------------------------


def test_stop_on_inqueue_ends_stopped(api, job):
    transition(job, JobStatus.INQUEUE, reason="quota full", actor=Actor.SCHEDULER)
    data = api.post(reverse("api:job-stop", args=[job.pk])).json()
    assert data["status"] == "Stopped" and data["status_reason"] == "stopped by alice"


def test_stop_on_running_is_graceful(api, job, node):
    place(job, node)
    data = api.post(reverse("api:job-stop", args=[job.pk])).json()
    assert data["status"] == "Running" and data["display_status"] == "Stopping…"
    # Stopping twice is not an error: the stop is already under way.
    assert api.post(reverse("api:job-stop", args=[job.pk])).status_code == 200


def test_stop_on_a_finished_job_is_409(api, job, node):
    finish(job, node)
    error = _error(api.post(reverse("api:job-stop", args=[job.pk])), 409, "conflict")
    assert "Completed" in error["message"]


def test_restart_creates_a_new_job(api, job, node):
    finish(job, node, JobStatus.FAILED)
    response = api.post(reverse("api:job-restart", args=[job.pk]))
    assert response.status_code == 201
    data = response.json()
    assert data["cloned_from"] == job.pk and data["id"] != job.pk
    assert data["status"] == "Pending" and data["pods"] == []
    assert Job.objects.count() == 2


def test_restart_of_an_active_job_is_409(api, job):
    _error(api.post(reverse("api:job-restart", args=[job.pk])), 409, "conflict")
    assert Job.objects.count() == 1


def test_restart_when_no_node_can_run_it_any_more(api, job, node):
    finish(job, node)
    Pod.objects.all().delete()
    node.delete()
    error = _error(api.post(reverse("api:job-restart", args=[job.pk])), 400, "validation_error")
    assert error["field"] == "quota"
    assert Job.objects.count() == 1
