"""Every page keeps a constant query count however many jobs there are: measured on a small
world, then asserted (django_assert_num_queries) after it grew, and on PostgreSQL after
100,000 more jobs (with their workers and events) were bulk-inserted."""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobs.actions.transitions import transition
from jobs.models import Job, JobEvent, LogChunk, Pod, ProgressSample, RestartRecord, WorkerGpuSample
from policy.statuses import Actor, JobStatus, PodStatus
from quotas.models import Role
from tests.conftest import make_node, make_user
from tests.web.conftest import HTMX, add_log, borrow, submit


def _pod(job: Job, node, indices, *, quota=None, in_quota=True, status=PodStatus.RUNNING) -> Pod:
    return Pod.objects.create(
        job=job,
        attempt=job.attempt,
        rank=0,
        node=node,
        gpu_indices=indices,
        gpus=len(indices),
        cpus=job.cpus_per_worker,
        memory_gb=job.memory_gb_per_worker,
        charged_quota=quota or job.quota,
        in_quota=in_quota,
        status=status,
    )


def grow(ctx: dict, batches: int) -> dict:
    """Add `batches` times (a running job with samples and logs, a queued one, a finished one,
    a failed one with a restart record, a borrower) on a new node each."""
    now = timezone.now()
    first = {}
    for _ in range(batches):
        ctx["n"] += 1
        n = ctx["n"]
        node = make_node(f"node-{n}")
        running = submit(
            ctx["alice"], ctx["ws"], ctx["quota"], name=f"train-{n}", max_runtime_seconds=3600
        )
        transition(running, JobStatus.STARTING, reason="placed", actor=Actor.SCHEDULER)
        pod = _pod(running, node, [0])
        transition(running, JobStatus.RUNNING, reason="all workers running", actor=Actor.AGENT)
        add_log(pod, 0, [f"step {i}" for i in range(20)])
        for i in range(3):
            at = now - timedelta(minutes=i)
            WorkerGpuSample.objects.create(
                pod=pod, at=at, gpus=1, utilization=i, memory_used_mb=100
            )
            ProgressSample.objects.create(
                pod=pod, at=at, step=i, rate=1.0, metrics={"loss": 1.0 / (i + 1)}
            )
        waiting = submit(ctx["alice"], ctx["ws"], ctx["quota"], name=f"wait-{n}", gpus_per_worker=8)
        transition(
            waiting, JobStatus.INQUEUE, reason="no node has 8 free H200 GPUs", actor=Actor.SCHEDULER
        )
        Job.objects.filter(pk=waiting.pk).update(queue_position=n)
        done = submit(ctx["alice"], ctx["ws"], ctx["quota"], name=f"done-{n}")
        transition(done, JobStatus.STARTING, reason="placed", actor=Actor.SCHEDULER)
        _pod(done, node, [1], status=PodStatus.SUCCEEDED)
        transition(done, JobStatus.RUNNING, reason="running", actor=Actor.AGENT)
        transition(done, JobStatus.COMPLETED, reason="done", actor=Actor.AGENT)
        failed = submit(ctx["bob"], ctx["ws"], ctx["quota"], name=f"fail-{n}")
        transition(failed, JobStatus.STARTING, reason="placed", actor=Actor.SCHEDULER)
        _pod(failed, node, [2], status=PodStatus.FAILED)
        transition(failed, JobStatus.RUNNING, reason="running", actor=Actor.AGENT)
        transition(failed, JobStatus.FAILED, reason="worker 0 exited 1", actor=Actor.AGENT)
        RestartRecord.objects.create(
            job=failed,
            from_attempt=1,
            to_attempt=2,
            created_at=now,
            kind="failure",
            reason="restart 1/3",
        )
        guest = submit(
            ctx["mallory"],
            ctx["other_ws"],
            ctx["other_quota"],
            name=f"guest-{n}",
            idle_resources="Only Idle Resources",
        )
        borrow(guest, node, ctx["quota"], [3])
        first = first or {"running": running, "waiting": waiting, "pod": pod, "node": node}
    return first


@pytest.fixture
def world(researcher, colleague, outsider, workspace, other_workspace, quota, other_quota):
    ctx = {
        "n": 0,
        "alice": researcher,
        "bob": colleague,
        "mallory": outsider,
        "ws": workspace,
        "other_ws": other_workspace,
        "quota": quota,
        "other_quota": other_quota,
    }
    ctx |= grow(ctx, 2)
    owner = make_user("olga", workspace, role=Role.QUOTA_OWNER)
    ctx["clients"] = {}
    for who, user in (("researcher", researcher), ("owner", owner)):
        client = Client()
        client.force_login(user)
        ctx["clients"][who] = client
    return ctx


def pages(ctx: dict) -> list[tuple[str, str, str, dict, dict | None]]:
    """(name, who, url, extra headers, POST data or None)."""
    running, waiting, node = ctx["running"].pk, ctx["waiting"].pk, ctx["node"].pk
    hint = {
        "quota": str(ctx["quota"].pk),
        "image": "busybox",
        "command": "echo",
        "gpus_per_worker": "8",
        "idle_resources": "Acceptable",
    }
    return [
        ("dashboard", "researcher", "/", {}, None),
        ("quotas (researcher)", "researcher", "/quotas/", {}, None),
        ("quotas (owner)", "owner", "/quotas/", {}, None),
        ("job list", "researcher", "/jobs/", {}, None),
        (
            "job list, filtered and sorted",
            "researcher",
            "/jobs/?status=Running,Inqueue,Completed&owner=me&q=a&sort=-gpus&since=7d",
            {},
            None,
        ),
        ("job list, Not in Quota", "owner", "/jobs/?placement=not_in_quota", {}, None),
        ("job list poll", "researcher", "/jobs/", HTMX, None),
        ("job detail (running)", "researcher", f"/jobs/{running}/", {}, None),
        ("job detail (waiting)", "researcher", f"/jobs/{waiting}/", {}, None),
        ("job detail poll", "researcher", f"/jobs/{running}/", HTMX, None),
        ("log viewer", "researcher", f"/jobs/{running}/logs/?format=json&after=5", {}, None),
        ("full log", "researcher", f"/jobs/{running}/logs/", {}, None),
        ("charts", "researcher", f"/jobs/{running}/metrics/", {}, None),
        ("create", "researcher", "/jobs/new/", {}, None),
        ("clone", "researcher", f"/jobs/new/?clone={running}", {}, None),
        ("plan hint", "researcher", "/jobs/new/hint/", HTMX, hint),
        ("token", "researcher", "/account/token/", {}, None),
        ("admin quotas", "owner", reverse("admin:quotas_quota_changelist"), {}, None),
        (
            "admin quota",
            "owner",
            reverse("admin:quotas_quota_change", args=[ctx["quota"].pk]),
            {},
            None,
        ),
        ("admin nodes", "owner", reverse("admin:cluster_node_changelist"), {}, None),
        ("admin node", "owner", reverse("admin:cluster_node_change", args=[node]), {}, None),
        ("admin jobs", "owner", reverse("admin:jobs_job_changelist"), {}, None),
    ]


def _get(ctx, who, url, extra, data):
    client = ctx["clients"][who]
    response = client.post(url, data, **extra) if data is not None else client.get(url, **extra)
    assert response.status_code in (200, 286), (url, response.status_code)
    return response


def measure(ctx) -> dict[str, int]:
    counts = {}
    for name, who, url, extra, data in pages(ctx):
        _get(ctx, who, url, extra, data)  # warm: sessions, content types, caches
        with CaptureQueriesContext(connection) as queries:
            _get(ctx, who, url, extra, data)
        counts[name] = len(queries.captured_queries)
    return counts


def assert_same_counts(ctx, counts, django_assert_num_queries) -> None:
    for name, who, url, extra, data in pages(ctx):
        with django_assert_num_queries(counts[name]):
            _get(ctx, who, url, extra, data)


def test_every_page_keeps_its_query_count_as_jobs_grow(world, django_assert_num_queries):
    counts = measure(world)
    grow(world, 6)
    assert_same_counts(world, counts, django_assert_num_queries)


def _bulk_copy(model, template_id: int, count: int, overrides: dict[str, str]) -> None:
    """INSERT `count` copies of one row in one statement (generate_series; PostgreSQL)."""
    columns = [f.column for f in model._meta.concrete_fields if f.column != "id"]
    values = [overrides.get(c, f"t.{c}") for c in columns]
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) "
            f"SELECT {', '.join(values)} FROM {table} t CROSS JOIN generate_series(1, %s) g "
            "WHERE t.id = %s",
            [count, template_id],
        )


BULK = 100_000


@pytest.mark.postgres
@pytest.mark.skipif(not django_settings.IS_POSTGRES, reason="needs PostgreSQL")
def test_every_page_keeps_its_query_count_with_100k_jobs(world, django_assert_num_queries):
    counts = measure(world)
    template = Job.objects.filter(status=JobStatus.FAILED).order_by("pk").first()
    # 100,000 finished jobs of the past months, 2% still waiting, each with one worker and
    # one event: the history a busy cluster piles up.
    _bulk_copy(
        Job,
        template.pk,
        BULK,
        {
            "name": "'bulk-' || g",
            "status": "CASE WHEN g %% 50 = 0 THEN 'Inqueue' WHEN g %% 7 = 0 THEN 'Failed' "
            "ELSE 'Completed' END",
            "created_at": "t.created_at - g * interval '1 minute'",
            "queue_position": "CASE WHEN g %% 50 = 0 THEN 100 + g / 50 END",
        },
    )
    pod = Pod.objects.filter(job=template).first()
    with connection.cursor() as cursor:
        columns = [f.column for f in Pod._meta.concrete_fields if f.column not in ("id", "job_id")]
        cursor.execute(
            f"INSERT INTO jobs_pod (job_id, {', '.join(columns)}) "
            f"SELECT j.id, {', '.join('p.' + c for c in columns)} FROM jobs_job j, jobs_pod p "
            "WHERE p.id = %s AND j.name LIKE 'bulk-%%'",
            [pod.pk],
        )
        event = JobEvent.objects.filter(job=template, to_status=JobStatus.FAILED).first()
        columns = [
            f.column for f in JobEvent._meta.concrete_fields if f.column not in ("id", "job_id")
        ]
        cursor.execute(
            f"INSERT INTO jobs_jobevent (job_id, {', '.join(columns)}) "
            f"SELECT j.id, {', '.join('e.' + c for c in columns)} FROM jobs_job j, "
            "jobs_jobevent e WHERE e.id = %s AND j.name LIKE 'bulk-%%'",
            [event.pk],
        )
        cursor.execute("ANALYZE")
    assert Job.objects.count() > BULK and Pod.objects.count() > BULK
    assert LogChunk.objects.exists()
    assert_same_counts(world, counts, django_assert_num_queries)
