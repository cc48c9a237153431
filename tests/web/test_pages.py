"""Researcher pages: access for every view, stop/restart, HTMX polling, query counts."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs.actions.transitions import transition
from jobs.models import Job, Pod, PodDesired
from policy.display import STOPPING
from policy.statuses import Actor, JobStatus, PodStatus
from tests.conftest import make_node
from tests.web.conftest import HTMX, Tree, finish, place, submit

JOB_VIEWS = [
    ("get", "web:detail"),
    ("get", "web:logs"),
    ("get", "web:logs-raw"),
    ("post", "web:stop"),
    ("post", "web:restart"),
    ("get", "web:compare"),
]


# Access ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["web:list", "web:create", "api-token"])
def test_anonymous_is_sent_to_login(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.parametrize(("method", "name"), JOB_VIEWS)
def test_anonymous_job_views_redirect_to_login(client, job, method, name):
    response = getattr(client, method)(reverse(name, args=[job.pk]))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and Job.objects.count() == 1


@pytest.mark.parametrize("name", ["web:detail", "web:logs", "web:logs-raw", "web:compare"])
@pytest.mark.parametrize("who", ["member_client", "colleague_client"])
def test_members_of_the_workspace_see_the_job(request, job, name, who):
    response = request.getfixturevalue(who).get(reverse(name, args=[job.pk]))
    assert response.status_code == 200


@pytest.mark.parametrize(("method", "name"), JOB_VIEWS)
def test_outsider_gets_404_and_changes_nothing(outsider_client, job, method, name):
    response = getattr(outsider_client, method)(reverse(name, args=[job.pk]))
    assert response.status_code == 404
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and Job.objects.count() == 1


def test_outsider_cannot_clone_a_job_into_the_form(outsider_client, job):
    assert outsider_client.get(reverse("web:create") + f"?clone={job.pk}").status_code == 404


def test_outsider_does_not_see_the_job_in_the_list(outsider_client, member_client, job):
    assert f"#{job.pk}</a>" not in outsider_client.get(reverse("web:list")).text
    assert f"#{job.pk}</a>" in member_client.get(reverse("web:list")).text


@pytest.mark.parametrize(
    ("method", "name", "args"),
    [
        ("post", "web:list", False),
        ("delete", "web:create", False),
        ("post", "web:detail", True),
        ("post", "web:logs", True),
        ("post", "web:logs-raw", True),
        ("get", "web:stop", True),
        ("get", "web:restart", True),
        ("post", "web:compare", True),
        ("put", "api-token", False),
    ],
)
def test_wrong_method_is_405(member_client, job, method, name, args):
    url = reverse(name, args=[job.pk] if args else [])
    assert getattr(member_client, method)(url).status_code == 405


def test_unknown_job_is_404(member_client, db):
    assert member_client.get(reverse("web:detail", args=[999999])).status_code == 404
    assert member_client.get("/jobs/99999999999999999999/").status_code == 404


# Pages ----------------------------------------------------------------------------------


def test_home_is_the_dashboard(member_client):
    response = member_client.get("/")
    assert response.status_code == 200
    assert "<h1>Dashboard</h1>" in response.text


def test_list_shows_status_reason_and_queue_position(member_client, job):
    transition(
        job, JobStatus.INQUEUE, reason="quota team-a: 16/16 GPUs in use", actor=Actor.SCHEDULER
    )
    Job.objects.filter(pk=job.pk).update(queue_position=3)
    html = member_client.get(reverse("web:list")).text
    assert 'class="badge badge-inqueue"' in html
    assert "quota team-a: 16/16 GPUs in use" in html
    assert "#3 in queue" in html


def test_list_filters_by_status_and_rejects_unknown(
    member_client, researcher, workspace, quota, node
):
    running = submit(researcher, workspace, quota, name="running-one")
    place(running, node)
    submit(researcher, workspace, quota, name="pending-one")
    html = member_client.get(reverse("web:list") + "?status=Running").text
    assert "running-one" in html and "pending-one" not in html
    response = member_client.get(reverse("web:list") + "?status=Sleeping")
    assert response.status_code == 400 and "Unknown status" in response.text


def test_list_pages_with_a_cursor(member_client, researcher, workspace, quota, node):
    for i in range(55):
        submit(researcher, workspace, quota, name=f"job-{i:02d}")
    first = member_client.get(reverse("web:list"))
    assert len(first.context["jobs"]) == 50 and first.context["next_cursor"]
    assert first.context["jobs"][0].name == "job-54"
    second = member_client.get(reverse("web:list") + "?cursor=" + first.context["next_cursor"])
    assert [j.name for j in second.context["jobs"]] == [f"job-{i:02d}" for i in range(4, -1, -1)]
    assert second.context["next_cursor"] is None


def test_detail_shows_workers_and_events(member_client, job, node):
    pods = place(job, node)
    Pod.objects.filter(pk=pods[0].pk).update(in_quota=False)
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    tree = Tree(html)
    workers = tree.by_id("job-live")
    assert workers is not None
    assert "node-0" in html and "Not in Quota" in html and "team-a" in html
    # Timeline: submitted → Starting → Running, with who did it.
    for reason in ("submitted", "placed", "all workers running"):
        assert reason in html
    assert "by alice" in html and "by scheduler" in html


def test_detail_shows_unknown_when_a_worker_is_unreachable(member_client, job, node):
    pods = place(job, node)
    Pod.objects.filter(pk=pods[0].pk).update(status=PodStatus.UNKNOWN)
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    assert "Unknown (node not reachable)" in html and "badge-unknown" in html


# Stop and restart -----------------------------------------------------------------------


def test_stop_on_inqueue_ends_stopped(member_client, job):
    transition(job, JobStatus.INQUEUE, reason="quota full", actor=Actor.SCHEDULER)
    response = member_client.post(reverse("web:stop", args=[job.pk]))
    assert response.status_code == 302 and response["Location"] == reverse(
        "web:detail", args=[job.pk]
    )
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and job.status_reason == "stopped by alice"


def test_colleague_can_stop_a_running_job_gracefully(colleague_client, job, node):
    place(job, node)
    response = colleague_client.post(reverse("web:stop", args=[job.pk]), follow=True)
    assert "Stop requested" in response.text
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.stop_requested_at is not None
    assert set(Pod.objects.values_list("desired", flat=True)) == {PodDesired.STOP}
    assert STOPPING in response.text and "badge-stopping" in response.text
    assert job.events.filter(user__username="bob", reason__contains="stop requested").exists()


def test_stop_on_a_finished_job_is_refused(member_client, job, node):
    finish(job, node)
    response = member_client.post(reverse("web:stop", args=[job.pk]), follow=True)
    assert "Cannot stop" in response.text
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED


def test_restart_creates_a_new_job_and_redirects_to_it(colleague_client, job, node, colleague):
    finish(job, node, JobStatus.FAILED)
    response = colleague_client.post(reverse("web:restart", args=[job.pk]))
    new = Job.objects.exclude(pk=job.pk).get()
    assert response.status_code == 302
    assert response["Location"] == reverse("web:detail", args=[new.pk])
    assert new.cloned_from_id == job.pk and new.status == JobStatus.PENDING
    assert new.owner == colleague
    assert (new.image, new.command, new.quota_id) == (job.image, job.command, job.quota_id)


def test_restart_of_an_active_job_is_refused(member_client, job):
    response = member_client.post(reverse("web:restart", args=[job.pk]), follow=True)
    assert "still Pending" in response.text
    assert Job.objects.count() == 1


def test_restart_rechecks_the_quota_binding(member_client, job, node, workspace, quota):
    finish(job, node)
    workspace.quotas.remove(quota)
    response = member_client.post(reverse("web:restart", args=[job.pk]), follow=True)
    assert "not bound to any of your workspaces" in response.text
    assert Job.objects.count() == 1


def test_actions_work_without_htmx(member_client, job, node):
    """Plain forms: the buttons are POST forms with an action, not HTMX-only widgets."""
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    stop_url = reverse("web:stop", args=[job.pk])
    assert f'<form method="post" action="{stop_url}" data-confirm=' in html  # asks, then posts
    finish(job, node)
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    assert f'action="{reverse("web:restart", args=[job.pk])}"' in html
    assert stop_url not in html


# HTMX polling ---------------------------------------------------------------------------


def test_list_rows_partial_polls_while_jobs_are_active(member_client, job, node):
    response = member_client.get(reverse("web:list"), **HTMX)
    assert response.status_code == 200
    html = response.text
    assert html.lstrip().startswith('<tbody id="job-rows"') and "<html" not in html
    assert "hx-trigger" in html
    finish(job, node)
    response = member_client.get(reverse("web:list"), **HTMX)
    assert response.status_code == 286
    assert "badge-completed" in response.text and "hx-trigger" not in response.text


def test_full_list_page_has_the_poller_only_when_live(member_client, job, node):
    assert 'id="job-rows" hx-get=' in member_client.get(reverse("web:list")).text
    finish(job, node)
    html = member_client.get(reverse("web:list")).text
    assert 'id="job-rows">' in html


def test_detail_partial_polls_until_final(member_client, job, node):
    url = reverse("web:detail", args=[job.pk])
    response = member_client.get(url, **HTMX)
    assert response.status_code == 200
    assert response.text.lstrip().startswith('<section id="job-live"')
    assert "hx-trigger" in response.text and "<html" not in response.text
    finish(job, node)
    response = member_client.get(url, **HTMX)
    assert response.status_code == 286
    assert "badge-completed" in response.text and "hx-trigger" not in response.text


def test_detail_partial_keeps_polling_while_stopping(member_client, job, node):
    place(job, node)
    member_client.post(reverse("web:stop", args=[job.pk]))
    response = member_client.get(reverse("web:detail", args=[job.pk]), **HTMX)
    assert response.status_code == 200 and STOPPING in response.text


def test_pages_load_htmx_and_send_csrf_with_it(member_client, job):
    html = member_client.get(reverse("web:detail", args=[job.pk])).text
    assert '<script src="/static/vendor/htmx.min.js"' in html
    assert '<body hx-headers=\'{"x-csrftoken": "' in html


# Query counts ---------------------------------------------------------------------------


def _count(client: Client, url: str, **extra) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url, **extra).status_code in (200, 286)
    return len(ctx.captured_queries)


@pytest.mark.parametrize("htmx", [False, True])
def test_list_page_queries_do_not_grow_with_jobs(
    member_client, researcher, workspace, quota, node, django_assert_num_queries, htmx
):
    extra = HTMX if htmx else {}
    first = submit(researcher, workspace, quota)
    place(first, node)
    submit(researcher, workspace, quota, name="waiting")  # the page forecasts its start
    one = _count(member_client, reverse("web:list"), **extra)
    other = make_node("node-1")
    for i in range(19):
        job = submit(researcher, workspace, quota, name=f"job-{i}")
        if i % 2:
            place(job, other if i % 4 == 1 else node)  # 5 and 4 one-GPU jobs
    with django_assert_num_queries(one):
        member_client.get(reverse("web:list"), **extra)


def test_detail_page_queries_do_not_grow_with_workers(
    member_client, researcher, workspace, quota, node, django_assert_num_queries
):
    small = submit(researcher, workspace, quota, workers=1)
    place(small, node)
    one = _count(member_client, reverse("web:detail", args=[small.pk]))
    big = submit(researcher, workspace, quota, workers=8, gpus_per_worker=1)
    place(big, make_node("node-big"))
    with django_assert_num_queries(one):
        member_client.get(reverse("web:detail", args=[big.pk]))


def test_htmx_csrf_header_from_the_body_is_accepted(researcher, job):
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    html = client.get(reverse("web:detail", args=[job.pk])).text
    token = re.search(r"hx-headers='\{\"x-csrftoken\": \"([^\"]+)\"\}'", html).group(1)
    url = reverse("web:stop", args=[job.pk])
    assert client.post(url).status_code == 403
    assert client.post(url, HTTP_X_CSRFTOKEN=token, **HTMX).status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
