"""Reading through the API: list filters, details, logs (follow), events, restarts,
checkpoints, metrics, why-pending, quotas, nodes, me; access for members and outsiders."""

import threading
import time
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.actions.transitions import transition
from jobs.models import Checkpoint, Pod, WorkerGpuSample
from policy.statuses import Actor, JobStatus, PodStatus
from tests.api.conftest import client_for, error_of
from tests.conftest import make_node
from tests.web.conftest import add_log, finish, place, submit

pytestmark = pytest.mark.django_db

JOB_READS = ["", "/logs", "/events", "/restarts", "/checkpoints", "/metrics", "/why-pending",
             "/expected-start"]  # fmt: skip


@pytest.mark.parametrize("suffix", JOB_READS)
def test_member_reads_and_outsider_gets_404(api, colleague, outsider, job, suffix):
    url = f"/api/v1/jobs/{job.pk}{suffix}"
    assert api.get(url).status_code == 200
    assert client_for(colleague).get(url).status_code == 200
    error_of(client_for(outsider).get(url), 404, "not_found")


@pytest.mark.parametrize("suffix", JOB_READS)
def test_anonymous_is_401(client, job, suffix):
    error_of(client.get(f"/api/v1/jobs/{job.pk}{suffix}"), 401, "not_authenticated")


def test_list_filters(api, researcher, colleague, workspace, quota, other_quota, node):
    from quotas.models import Membership

    mine = submit(researcher, workspace, quota, name="resnet-a")
    theirs = submit(colleague, workspace, quota, name="bert-b")
    place(theirs, node)
    workspace.quotas.add(other_quota)
    other = submit(researcher, workspace, other_quota, name="resnet-c")
    finish(other, node)
    assert Membership.objects.filter(user=researcher).count() == 1

    def ids(query: str) -> list[int]:
        response = api.get("/api/v1/jobs?" + query)
        assert response.status_code == 200, response.content
        return [j["id"] for j in response.json()["jobs"]]

    assert ids("owner=me") == [other.pk, mine.pk]
    assert ids("owner=bob") == [theirs.pk]
    assert ids("quota=team-b") == [other.pk]
    assert ids(f"quota={other_quota.pk}") == [other.pk]
    assert ids("name=RESNET") == [other.pk, mine.pk]
    assert ids("state=active") == [theirs.pk, mine.pk]
    assert ids("state=finished") == [other.pk]
    assert ids("status=Running,Completed") == [other.pk, theirs.pk]
    assert ids("workspace=vision") == [other.pk, theirs.pk, mine.pk]
    assert ids("workspace=speech") == []
    later = (timezone.now() + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert ids(f"created_before={later}") == [other.pk, theirs.pk, mine.pk]
    assert ids(f"created_after={later}") == []


@pytest.mark.parametrize(
    ("query", "field"),
    [("state=sleeping", "state"), ("created_after=yesterday", "created_after"),
     ("limit=0", "limit"), ("status=Nope", "status"), ("cursor=zzz", "cursor")],
)  # fmt: skip
def test_list_rejects_bad_filters(api, job, query, field):
    assert error_of(api.get("/api/v1/jobs?" + query), 400, "validation_error")["field"] == field


def test_detail_queries_do_not_grow_with_workers(
    api, researcher, workspace, quota, node, django_assert_num_queries
):
    small = submit(researcher, workspace, quota)
    place(small, node)
    api.get(f"/api/v1/jobs/{small.pk}")
    with CaptureQueriesContext(connection) as ctx:
        api.get(f"/api/v1/jobs/{small.pk}")
    big = submit(researcher, workspace, quota, workers=6)
    place(big, node)
    with django_assert_num_queries(len(ctx.captured_queries)):
        assert len(api.get(f"/api/v1/jobs/{big.pk}").json()["pods"]) == 6


# Logs ------------------------------------------------------------------------------------


@pytest.fixture
def no_cycles(settings):
    """Commits wake no scheduler: the test moves the job itself."""
    settings.CONSOLE_LOOPS = "inprocess"


@pytest.mark.django_db(transaction=True)
def test_follow_waits_for_new_lines(no_cycles, api, job, node):
    """The request waits; a line stored meanwhile (another connection) ends the wait."""
    pod = place(job, node)[0]
    add_log(pod, 0, ["first"])
    url = f"/api/v1/jobs/{job.pk}/logs?follow=true&wait=20&after=0"

    def later():
        time.sleep(0.5)
        try:
            add_log(pod, 1, ["second"])
        finally:
            connection.close()

    started = time.monotonic()
    writer = threading.Thread(target=later)
    writer.start()
    data = api.get(url).json()
    writer.join()
    assert [line["text"] for line in data["lines"]] == ["second"]
    assert 0.4 < time.monotonic() - started < 15


def test_follow_gives_up_after_wait(api, job, node):
    place(job, node)
    started = time.monotonic()
    data = api.get(f"/api/v1/jobs/{job.pk}/logs?follow=true&wait=1").json()
    assert data["lines"] == [] and data["complete"] is False
    assert 0.9 <= time.monotonic() - started < 10


def test_logs_point_to_a_newer_attempt(api, job, node):
    (pod,) = place(job, node)
    add_log(pod, 0, ["attempt one"])
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.FAILED)
    transition(job, JobStatus.PENDING, reason="restart 1/3", actor=Actor.AGENT, attempt=2)
    new = Pod.objects.create(
        job=job, attempt=2, rank=0, node=node, gpu_indices=[0], gpus=1,
        charged_quota=job.quota, status=PodStatus.RUNNING,
    )  # fmt: skip
    add_log(new, 0, ["attempt two"])
    first = api.get(f"/api/v1/jobs/{job.pk}/logs?attempt=1&after=0&follow=true&wait=5").json()
    assert first["lines"] == [] and first["worker_final"] is True
    assert first["newer_attempt"] == 2
    second = api.get(f"/api/v1/jobs/{job.pk}/logs?attempt=2").json()
    assert [line["text"] for line in second["lines"]] == ["attempt two"]
    assert second["newer_attempt"] is None


def test_logs_of_a_restarted_job_that_finished_are_complete_only_on_the_last_attempt(
    api, job, node
):
    """The same rule as the job page's viewer (jobs.logview.follow): the job failed,
    restarted and finished before this reader came; attempt 1 is read, attempt 2 is not."""
    (pod,) = place(job, node)
    add_log(pod, 0, ["attempt one"])
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.FAILED, finished_at=timezone.now())
    transition(job, JobStatus.PENDING, reason="restart 1/3", actor=Actor.AGENT, attempt=2)
    new = Pod.objects.create(
        job=job, attempt=2, rank=0, node=node, gpu_indices=[0], gpus=1,
        charged_quota=job.quota, status=PodStatus.SUCCEEDED, finished_at=timezone.now(),
    )  # fmt: skip
    add_log(new, 0, ["attempt two"])
    for status in (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.COMPLETED):
        transition(job, status, reason="attempt 2", actor=Actor.AGENT)
    with time_machine.travel(timezone.now() + timedelta(minutes=5), tick=False):
        old = api.get(f"/api/v1/jobs/{job.pk}/logs?attempt=1&after=0").json()
        assert old["complete"] is False and old["newer_attempt"] == 2
        last = api.get(f"/api/v1/jobs/{job.pk}/logs?attempt=2").json()
        assert [line["text"] for line in last["lines"]] == ["attempt two"]
        assert last["complete"] is True


# Events, restarts, checkpoints, metrics ---------------------------------------------------


def test_events_page_by_id(api, job, node):
    place(job, node)
    first = api.get(f"/api/v1/jobs/{job.pk}/events?limit=2").json()
    assert [e["to_status"] for e in first["events"]] == ["Pending", "Starting"]
    rest = api.get(f"/api/v1/jobs/{job.pk}/events?after={first['next_after']}").json()
    assert [e["to_status"] for e in rest["events"]] == ["Running"]
    assert rest["next_after"] is None


def test_checkpoints_and_metrics(api, job, node):
    (pod,) = place(job, node)
    for step, committed in ((100, True), (200, False)):
        Checkpoint.objects.create(
            job=job, attempt=1, step=step, path=f"/ck/step-{step}", committed=committed
        )
    Pod.objects.filter(pk=pod.pk).update(
        progress_step=340, progress_total=1000, progress_phase="train",
        progress_metrics={"loss": 0.21}, progress_at=timezone.now(), progress_rate=2.5,
    )  # fmt: skip
    now = timezone.now()
    WorkerGpuSample.objects.bulk_create(
        WorkerGpuSample(pod=pod, at=now - timedelta(seconds=s), gpus=1, utilization=90 - s,
                        memory_used_mb=1000)
        for s in (30, 20, 10)
    )  # fmt: skip
    steps = [c["step"] for c in api.get(f"/api/v1/jobs/{job.pk}/checkpoints").json()["checkpoints"]]
    assert steps == [200, 100]
    committed = api.get(f"/api/v1/jobs/{job.pk}/checkpoints?committed=true").json()
    assert [c["step"] for c in committed["checkpoints"]] == [100]
    metrics = api.get(f"/api/v1/jobs/{job.pk}/metrics").json()
    (worker,) = metrics["workers"]
    assert worker["progress"]["step"] == 340 and worker["progress"]["metrics"] == {"loss": 0.21}
    assert [s["utilization"] for s in worker["gpu"]] == [60, 70, 80]
    assert worker["progress_rate"] == 2.5


# Why pending, expected start, quotas ------------------------------------------------------


def test_why_pending_and_expected_start(api, researcher, workspace, quota, node):
    # team-a has 16 GPUs: 8 held by a job that ends in an hour at most, 8 by one without a
    # limit. A waiting 8-GPU job can start when the first reaches its max runtime.
    bounded = submit(researcher, workspace, quota, workers=1, gpus_per_worker=8,
                     max_runtime_seconds=3600)  # fmt: skip
    place(bounded, node)
    other = make_node("node-1")
    place(submit(researcher, workspace, quota, gpus_per_worker=8), other)
    waiting = submit(researcher, workspace, quota, gpus_per_worker=8)
    transition(waiting, JobStatus.INQUEUE, reason="quota team-a: 16/16 GPUs in use, job needs 8",
               actor=Actor.SCHEDULER, queue_position=1)  # fmt: skip
    data = api.get(f"/api/v1/jobs/{waiting.pk}/why-pending").json()
    assert data["waiting"] is True and data["queue_position"] == 1
    assert data["reason"].startswith("quota team-a: 16/16")
    assert data["quota_usage"] == {
        "size": 16, "used": 16, "in_quota": 16, "idle_own": 0,
        "lent": 0, "borrowed": 0, "free": 0, "starved": False,
        "own": 16, "subtree_used": 16, "subtree_lent": 0, "subtree_borrowed": 0,
    }  # fmt: skip
    bounded.refresh_from_db()
    expected = bounded.started_at + timedelta(seconds=3600)
    assert data["expected_start"]["at"] == expected.isoformat()
    # Without any bound on the holders there is no estimate, and it says why.
    bounded.max_runtime_seconds = None
    bounded.save()
    estimate = api.get(f"/api/v1/jobs/{waiting.pk}/expected-start").json()
    assert estimate["at"] is None and "has no max runtime" in estimate["basis"]


def test_quota_usage_used_lent_borrowed(api, researcher, colleague, workspace, other_workspace,
                                        quota, other_quota, node):  # fmt: skip
    # An idle job of team-b borrows 2 GPUs of team-a.
    from tests.conftest import make_user

    speaker = make_user("carol", other_workspace)
    borrower = submit(speaker, other_workspace, other_quota, gpus_per_worker=2,
                      idle_resources="Acceptable")  # fmt: skip
    pods = place(borrower, node)
    Pod.objects.filter(pk=pods[0].pk).update(charged_quota=quota, in_quota=False)
    place(submit(researcher, workspace, quota, gpus_per_worker=4), node)
    waiting = submit(colleague, workspace, quota)
    transition(waiting, JobStatus.INQUEUE, reason="x", actor=Actor.SCHEDULER, queue_position=1)
    mine = submit(researcher, workspace, quota)
    transition(mine, JobStatus.INQUEUE, reason="x", actor=Actor.SCHEDULER, queue_position=2)
    data = api.get("/api/v1/quotas").json()["quotas"]
    assert [q["name"] for q in data] == ["team-a"]
    (team_a,) = data
    # The scheduler's numbers: used counts every GPU charged here (its own 4 in quota and
    # the 2 lent to team-b's idle job); a job waits with room in the guarantee: starved.
    assert team_a["usage"] == {"size": 16, "used": 6, "in_quota": 4, "idle_own": 0, "lent": 2,
                               "borrowed": 0, "free": 10, "starved": True, "own": 16,
                               "subtree_used": 4, "subtree_lent": 2,
                               "subtree_borrowed": 0}  # fmt: skip
    # A flat quota is a root of its own: no parent, no limits, weight 1.
    assert (team_a["parent"], team_a["own_gpus"], team_a["max_gpus"]) == (None, 16, None)
    assert (team_a["lending_limit"], team_a["weight"]) == (None, 1.0)
    assert team_a["queue"] == {"waiting": 2, "waiting_gpus": 2, "mine": [2]}
    their = client_for(speaker).get("/api/v1/quotas/team-b").json()
    assert their["usage"]["borrowed"] == 2 and their["usage"]["used"] == 0
    queue = api.get("/api/v1/quotas/team-a/queue").json()["jobs"]
    assert [(e["position"], e["job"], e["mine"]) for e in queue] == [
        (1, waiting.pk, False), (2, mine.pk, True)
    ]  # fmt: skip


def test_queue_hides_other_workspaces_jobs(api, researcher, workspace, other_workspace, quota,
                                           node):  # fmt: skip
    from tests.conftest import make_user

    other_workspace.quotas.add(quota)
    stranger = make_user("dave", other_workspace)
    theirs = submit(stranger, other_workspace, quota, name="secret-project")
    transition(theirs, JobStatus.INQUEUE, reason="x", actor=Actor.SCHEDULER, queue_position=1)
    (entry,) = api.get("/api/v1/quotas/team-a/queue").json()["jobs"]
    assert entry["job"] is None and entry["name"] is None and entry["owner"] is None
    assert entry["workspace"] == "(another workspace)" and entry["position"] == 1


def test_quotas_of_other_workspaces_are_404(api, other_quota):
    error_of(api.get("/api/v1/quotas/team-b"), 404, "not_found")
    error_of(api.get(f"/api/v1/quotas/{other_quota.pk}/queue"), 404, "not_found")


def test_quota_list_queries_do_not_grow(
    api, researcher, tenant, workspace, node, django_assert_num_queries
):
    from quotas.models import Quota

    def add(n):
        for i in range(n):
            q = Quota.objects.create(tenant=tenant, name=f"q{Quota.objects.count()}-{i}",
                                     gpu_type="H200", gpus=4)  # fmt: skip
            workspace.quotas.add(q)
            place(submit(researcher, workspace, q), node)

    add(1)
    api.get("/api/v1/quotas")
    with CaptureQueriesContext(connection) as ctx:
        api.get("/api/v1/quotas")
    add(5)
    with django_assert_num_queries(len(ctx.captured_queries)):
        assert len(api.get("/api/v1/quotas").json()["quotas"]) == 6


def test_nodes_and_me(api, node, researcher):
    assert api.get("/api/v1/nodes/node-0").json()["gpus"] == 8
    error_of(api.get("/api/v1/nodes/nope"), 404, "not_found")
    me = api.get("/api/v1/me").json()
    assert me["username"] == "alice" and me["workspaces"] == ["vision"]
    assert me["is_admin"] is False and me["rate_limit"] == "600 per 60s"
