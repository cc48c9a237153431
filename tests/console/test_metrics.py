"""/metrics: access (bearer token or superuser), every family computed from the database at
scrape time, and a query count that does not grow with the number of jobs."""

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from console.actions import record_run
from console.metrics import preemption_reason
from console.models import LoopRun
from jobs.actions.transitions import transition
from jobs.models import Pod, RestartKind, RestartRecord
from policy.statuses import Actor, IdleResources, JobStatus, PodStatus
from tests.conftest import make_node, make_user
from tests.web.conftest import add_log, finish, place, submit

TOKEN = "metrics-token-0123456789abcdefghijklmnop"


@pytest.fixture
def metrics_token(settings) -> str:
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client: Client | None = None, token: str = TOKEN) -> dict[tuple[str, tuple], float]:
    client = client or Client()
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


# --- access -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_anonymous_and_wrong_token_get_401(metrics_token):
    for header in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": TOKEN}):
        response = Client().get("/metrics", **header)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthenticated"
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'


@pytest.mark.django_db
def test_without_a_configured_token_no_bearer_works(settings):
    settings.METRICS_TOKEN = ""
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401


@pytest.mark.django_db
def test_member_gets_403_and_superuser_200(researcher, metrics_token):
    member = Client()
    member.force_login(researcher)
    assert member.get("/metrics").status_code == 403
    admin = Client()
    admin.force_login(make_user("root", is_superuser=True, is_staff=True))
    assert admin.get("/metrics").status_code == 200


@pytest.mark.django_db
def test_only_get(metrics_token):
    response = Client().post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 405


# --- values -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_family_reflects_the_database(
    metrics_token, researcher, workspace, quota, other_quota, other_workspace
):
    other_workspace.members.add(researcher)
    node = make_node("node-0", gpus=8)
    late = make_node("node-1", gpus=8)
    late.last_heartbeat_at = timezone.now() - timedelta(seconds=90)
    late.save(update_fields=["last_heartbeat_at"])
    t0 = timezone.now()
    with time_machine.travel(t0 - timedelta(minutes=10), tick=False):
        submit(researcher, workspace, quota, name="old-wait", gpus_per_worker=2)
    with time_machine.travel(t0 - timedelta(minutes=1), tick=False):
        queued = submit(researcher, workspace, quota, name="new-wait", gpus_per_worker=2)
        transition(queued, JobStatus.INQUEUE, reason="quota full", actor=Actor.SCHEDULER)
    running = submit(researcher, workspace, quota, name="running", gpus_per_worker=4)
    [pod] = place(running, node)
    # An idle-resources job of team-b running on team-a's GPUs: lent by a, borrowed by b.
    idle = submit(
        researcher,
        other_workspace,
        other_quota,
        name="idle",
        gpus_per_worker=2,
        idle_resources=IdleResources.ACCEPTABLE,
    )
    [idle_pod] = place(idle, node)
    Pod.objects.filter(pk=idle_pod.pk).update(charged_quota=quota, in_quota=False)
    finish(submit(researcher, workspace, quota, name="done"), node)
    reclaimed = submit(researcher, other_workspace, other_quota, name="reclaimed")
    place(reclaimed, node)
    Pod.objects.filter(job=reclaimed).update(status=PodStatus.PREEMPTED)
    transition(
        reclaimed,
        JobStatus.PREEMPTED,
        reason="reclaimed by team-a for job x",
        actor=Actor.SCHEDULER,
    )
    for kind, reason in (
        (RestartKind.FAILURE, "restart 1/3: worker 0 exited 1"),
        (
            RestartKind.PREEMPTION,
            "restart after preemption 1: preempted: preempted by higher-priority job y",
        ),
        (RestartKind.NODE_LOST, "restart after node loss 1"),
    ):
        RestartRecord.objects.create(
            job=running, from_attempt=1, to_attempt=2, created_at=t0, kind=kind, reason=reason
        )
    add_log(pod, 0, ["a", "b", "c"])
    Pod.objects.filter(pk=pod.pk).update(log_next_seq=3)
    Pod.objects.filter(pk=idle_pod.pk).update(log_next_seq=4)
    record_run("scheduler", t0, 0.25, None)
    record_run("scheduler", t0, 0.75, "OperationalError: lock timeout")

    with time_machine.travel(t0, tick=False):
        samples = scrape()

    assert value(samples, "gpu_console_jobs", status="Pending") == 1
    assert value(samples, "gpu_console_jobs", status="Inqueue") == 1
    assert value(samples, "gpu_console_jobs", status="Running") == 2
    assert value(samples, "gpu_console_jobs", status="Completed") == 1
    assert value(samples, "gpu_console_jobs", status="Preempted") == 1
    assert value(samples, "gpu_console_jobs", status="Failed") == 0
    assert value(samples, "gpu_console_queue_depth", quota="team-a") == 2
    assert value(samples, "gpu_console_queue_depth", quota="team-b") == 0
    assert value(samples, "gpu_console_queue_oldest_wait_seconds", quota="team-a") == 600
    assert value(samples, "gpu_console_queue_oldest_wait_seconds", quota="team-b") == 0
    assert value(samples, "gpu_console_quota_gpus_guaranteed", quota="team-a") == 16
    assert value(samples, "gpu_console_quota_gpus_used", quota="team-a") == 6  # 4 own + 2 lent
    assert value(samples, "gpu_console_quota_gpus_lent", quota="team-a") == 2
    assert value(samples, "gpu_console_quota_gpus_borrowed", quota="team-a") == 0
    assert value(samples, "gpu_console_quota_gpus_used", quota="team-b") == 0
    assert value(samples, "gpu_console_quota_gpus_borrowed", quota="team-b") == 2
    assert value(samples, "gpu_console_loop_duration_seconds_count", loop="scheduler") == 2
    assert value(samples, "gpu_console_loop_duration_seconds_sum", loop="scheduler") == 1.0
    assert value(samples, "gpu_console_loop_last_duration_seconds", loop="scheduler") == 0.75
    assert value(samples, "gpu_console_loop_failures_total", loop="scheduler") == 1
    assert value(samples, "gpu_console_loop_last_run_timestamp_seconds", loop="scheduler") == (
        LoopRun.objects.get(name="scheduler").last_finished_at.timestamp()
    )
    assert value(samples, "gpu_console_preemptions_total", reason="reclaim") == 1
    assert value(samples, "gpu_console_preemptions_total", reason="priority") == 1
    assert value(samples, "gpu_console_preemptions_total", reason="other") == 0
    assert value(samples, "gpu_console_restarts_total", kind="failure") == 1
    assert value(samples, "gpu_console_restarts_total", kind="preemption") == 1
    assert value(samples, "gpu_console_restarts_total", kind="node_lost") == 1
    assert value(samples, "gpu_console_restarts_total", kind="hang") == 0
    assert value(samples, "gpu_console_node_heartbeat_age_seconds", node="node-1") == pytest.approx(
        90, abs=5
    )
    assert value(samples, "gpu_console_node_heartbeat_age_seconds", node="node-0") < 30
    assert value(samples, "gpu_console_node_state", node="node-0", state="Ready") == 1
    assert value(samples, "gpu_console_log_lines_ingested_total") == 7


@pytest.mark.django_db
def test_a_restarted_job_waits_from_its_restart_not_its_submission(
    metrics_token, researcher, workspace, quota
):
    t0 = timezone.now()
    with time_machine.travel(t0 - timedelta(hours=2), tick=False):
        job = submit(researcher, workspace, quota)
        place(job, make_node())
    with time_machine.travel(t0 - timedelta(seconds=30), tick=False):
        transition(job, JobStatus.PENDING, reason="restart 1/3", actor=Actor.AGENT, attempt=2)
    with time_machine.travel(t0, tick=False):
        samples = scrape()
    assert value(samples, "gpu_console_queue_oldest_wait_seconds", quota="team-a") == 30


@pytest.mark.django_db
def test_query_count_does_not_grow_with_jobs(metrics_token, researcher, workspace, quota):
    node = make_node(gpus=16)  # one GPU for each running job (a GPU has one live holder)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape()
        return len(captured)

    place(submit(researcher, workspace, quota), node)
    submit(researcher, workspace, quota)
    few = queries()
    for _ in range(15):
        place(submit(researcher, workspace, quota), node)
        submit(researcher, workspace, quota)
    assert queries() == few
    assert few <= 14


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("reclaimed by team-a for job train (#3)", "reclaim"),
        ("restart after preemption 1: preempted: reclaimed by team-a for job x", "reclaim"),
        ("preempted by higher-priority job y (#9) in quota team-a", "priority"),
        ("preempted by the system", "other"),
        ("", "other"),
    ],
)
def test_preemption_reason(text, reason):
    assert preemption_reason(text) == reason


# --- the scheduling cycles' own figures ---------------------------------------------------


@pytest.mark.django_db
def test_cycles_counted_in_redis_are_scraped_where_celery_runs_them(
    metrics_token, settings, monkeypatch
):
    from jobs.scheduler import figures
    from tests.redis_store import URL, redis_or_skip

    settings.CONSOLE_LOOPS, settings.REDIS_URL = "celery", redis_or_skip(URL)
    monkeypatch.setattr(figures, "KEY", f"test:cycles:{uuid.uuid4().hex}")  # this test's own
    for seconds in (0.25, 0.5):
        figures.record(seconds)
    samples = scrape()
    assert value(samples, "gpu_console_scheduler_cycle_seconds_count") == 2
    assert value(samples, "gpu_console_scheduler_cycle_seconds_sum") == 0.75


@pytest.mark.django_db
def test_an_unreachable_redis_costs_the_cycles_family_not_the_scrape(metrics_token, settings):
    settings.CONSOLE_LOOPS, settings.REDIS_URL = "celery", "redis://127.0.0.1:1/0"
    samples = scrape()
    assert not [name for name, _ in samples if name.startswith("gpu_console_scheduler_cycle")]
    assert value(samples, "gpu_console_jobs", status="Running") == 0  # the rest is there


@pytest.mark.django_db
def test_in_process_loops_have_no_cycles_family(metrics_token, settings):
    """There a run of the scheduler loop is one cycle: the loop's own figures say it."""
    settings.CONSOLE_LOOPS = "inprocess"
    samples = scrape()
    assert not [name for name, _ in samples if name.startswith("gpu_console_scheduler_cycle")]
