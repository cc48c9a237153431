"""What a job produced and why it waits: logs (with a follow mode), events, restarts,
checkpoints, metrics, why-pending and the expected start."""

import time
from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router
from pydantic import Field

from accounts.api_auth import ApiError
from api import schemas
from api.jobs import READ_ERRORS
from api.parsing import reject_unknown_query
from api.serializers import (
    checkpoint_json,
    event_json,
    expected_start_json,
    log_line_json,
    progress_json,
    restart_json,
)
from api.usage import usage_json
from jobs import logview
from jobs.access import get_job_for_user
from jobs.forecast import current_snapshot
from jobs.models import Job, Pod, WorkerGpuSample
from policy.accounting import account
from policy.statuses import FINAL_POD_STATUSES, WAITING_JOB_STATUSES

router = Router()

FOLLOW_POLL = 0.5  # seconds between looks while a follow request waits for lines
MAX_SAMPLES = 10_000


class LogParams(schemas.Schema):
    rank: int = Field(0, ge=0, le=10_000, description="The worker.")
    attempt: int | None = Field(
        None, ge=1, le=1_000_000, description="Default: this worker's newest attempt."
    )
    after: int = Field(-1, ge=-1, le=2**62, description="Return lines after this seq.")
    limit: int = Field(logview.DEFAULT_LIMIT, ge=1, le=logview.MAX_LIMIT)
    follow: bool = Field(
        False, description="Wait (long-poll) for new lines when there are none yet."
    )
    wait: int = Field(20, ge=0, le=300, description="Longest wait in follow mode, seconds.")


@router.get(
    "/{int:job_id}/logs",
    response={200: schemas.Logs, **READ_ERRORS},
    url_name="job-logs",
    summary="A worker's log lines after a cursor; follow=true waits for new ones",
)
def job_logs(request: HttpRequest, job_id: int, params: Query[LogParams]):
    """Page with `after=<next_after>`. With `follow=true` an empty answer waits up to `wait`
    seconds for lines. Follow a job across restarts by moving to `newer_attempt` (after=-1)
    once an answer has no more lines: it is set only when this attempt's worker has ended
    and its agent said its log ended (or its node was lost: `log_gap`). Stop at `complete`.
    A worker that does not exist and never will (a rank beyond the job's workers, an
    attempt it did not run in, a worker named of a job that ended before placing it) is
    404; one not placed yet answers no lines, and the log of a job that ended before placing
    any worker is empty and complete."""
    reject_unknown_query(request, LogParams)
    job = get_job_for_user(request.user, job_id)
    wait = min(params.wait, settings.API_LOG_WAIT_MAX) if params.follow else 0
    deadline = time.monotonic() + wait
    while True:
        pod = logview.pick_pod(job, rank=params.rank, attempt=params.attempt)
        named = params.rank if "rank" in request.GET else None  # the job's log: rank 0
        missing = logview.missing_pod(job, pod, rank=named, attempt=params.attempt)
        if missing:  # not "no lines yet": that worker never runs
            raise ApiError(404, "not_found", missing)
        lines = logview.read_after(pod, params.after, params.limit) if pod else []
        state = logview.follow(job, pod, caught_up=len(lines) < params.limit, now=timezone.now())
        complete, newer = state.complete, state.newer_attempt
        worker_final = pod is not None and pod.status in FINAL_POD_STATUSES
        if lines or complete or newer or time.monotonic() >= deadline:
            break
        time.sleep(FOLLOW_POLL)
        job.refresh_from_db()
    return {
        "job": job.pk,
        "rank": pod.rank if pod else params.rank,
        "attempt": pod.attempt if pod else params.attempt,
        "lines": [log_line_json(line) for line in lines],
        "next_after": lines[-1].seq if lines else params.after,
        "complete": complete,
        "worker_final": worker_final,
        "newer_attempt": newer,
        "log_gap": state.gap,
    }


class EventParams(schemas.Schema):
    after: int = Field(0, ge=0, le=2**62, description="Events after this id (next_after).")
    limit: int = Field(200, ge=1, le=1000)


@router.get(
    "/{int:job_id}/events",
    response={200: schemas.EventPage, **READ_ERRORS},
    url_name="job-events",
    summary="The job's timeline: every status change and decision, oldest first",
)
def job_events(request: HttpRequest, job_id: int, params: Query[EventParams]):
    reject_unknown_query(request, EventParams)
    job = get_job_for_user(request.user, job_id)
    events = list(
        job.events.filter(pk__gt=params.after)
        .select_related("user")
        .order_by("pk")[: params.limit + 1]
    )
    more = len(events) > params.limit
    events = events[: params.limit]
    return {
        "events": [event_json(e) for e in events],
        "next_after": events[-1].pk if more else None,
    }


@router.get(
    "/{int:job_id}/restarts",
    response={200: schemas.RestartList, **READ_ERRORS},
    url_name="job-restarts",
    summary="Automatic Fault Tolerance restart records",
)
def job_restarts(request: HttpRequest, job_id: int):
    job = get_job_for_user(request.user, job_id)
    return {"restarts": [restart_json(r) for r in job.restarts.order_by("created_at", "id")]}


class CheckpointParams(schemas.Schema):
    committed: bool | None = Field(None, description="Only committed (or uncommitted) ones.")
    include_pruned: bool = Field(
        False, description="Also the ones whose files are gone (pruned), with their pruned_at."
    )
    limit: int = Field(100, ge=1, le=1000)


@router.get(
    "/{int:job_id}/checkpoints",
    response={200: schemas.CheckpointList, **READ_ERRORS},
    url_name="job-checkpoints",
    summary="Checkpoints, newest step first",
)
def job_checkpoints(request: HttpRequest, job_id: int, params: Query[CheckpointParams]):
    reject_unknown_query(request, CheckpointParams)
    job = get_job_for_user(request.user, job_id)
    checkpoints = job.checkpoints.order_by("-step", "-id")
    if not params.include_pruned:  # files gone (the agent's scan no longer finds them)
        checkpoints = checkpoints.filter(pruned_at__isnull=True)
    if params.committed is not None:
        checkpoints = checkpoints.filter(committed=params.committed)
    return {"checkpoints": [checkpoint_json(c) for c in checkpoints[: params.limit]]}


class MetricParams(schemas.Schema):
    attempt: int | None = Field(None, ge=1, le=1_000_000, description="Default: the current.")
    minutes: int = Field(60, ge=1, le=7 * 24 * 60, description="GPU samples of the last …")


@router.get(
    "/{int:job_id}/metrics",
    response={200: schemas.Metrics, **READ_ERRORS},
    url_name="job-metrics",
    summary="Per-worker GPU samples and the training SDK's progress metrics",
)
def job_metrics(request: HttpRequest, job_id: int, params: Query[MetricParams]):
    reject_unknown_query(request, MetricParams)
    job = get_job_for_user(request.user, job_id)
    attempt = params.attempt or job.attempt
    since = timezone.now() - timedelta(minutes=params.minutes)
    pods = list(
        Pod.objects.filter(job=job, attempt=attempt).select_related("node").order_by("rank")
    )
    # The newest samples up to a cap, then in time order (one query for all workers).
    samples = list(
        WorkerGpuSample.objects.filter(pod__in=pods, at__gte=since)
        .order_by("-at")
        .values_list("pod_id", "at", "gpus", "utilization", "memory_used_mb")[:MAX_SAMPLES]
    )
    by_pod: dict[int, list[dict]] = {pod.pk: [] for pod in pods}
    for pod_id, at, gpus, utilization, memory in reversed(samples):
        by_pod[pod_id].append(
            {
                "at": at.isoformat(),
                "gpus": gpus,
                "utilization": utilization,
                "memory_used_mb": memory,
            }
        )
    return {
        "job": job.pk,
        "attempt": attempt,
        "since": since.isoformat(),
        "workers": [
            {
                "rank": pod.rank,
                "attempt": pod.attempt,
                "node": pod.node.name if pod.node_id else None,
                "status": pod.status,
                "progress": progress_json(pod),
                "progress_rate": pod.progress_rate,
                "gpu": by_pod[pod.pk],
            }
            for pod in pods
        ],
    }


def _expected(job: Job, snapshot=None) -> dict:
    if job.status not in WAITING_JOB_STATUSES:
        return {"estimate": True, "at": None, "basis": f"the job is {job.status}, not waiting"}
    return expected_start_json([job], snapshot)[job.pk]


@router.get(
    "/{int:job_id}/why-pending",
    response={200: schemas.WhyPending, **READ_ERRORS},
    url_name="job-why-pending",
    summary="Why the job waits, its place in the queue and when it could start",
)
def why_pending(request: HttpRequest, job_id: int):
    job = get_job_for_user(request.user, job_id)
    snapshot = current_snapshot()
    usage = usage_json(account(snapshot).quotas.get(job.quota_id), job.quota.gpus)
    return {
        "job": job.pk,
        "status": job.status,
        "waiting": job.status in WAITING_JOB_STATUSES,
        "reason": job.status_reason,
        "queue_position": job.queue_position,
        "quota": job.quota.name,
        "quota_usage": usage,
        "needs_gpus": job.total_gpus,
        "expected_start": _expected(job, snapshot),
    }


@router.get(
    "/{int:job_id}/expected-start",
    response={200: schemas.ExpectedStart, **READ_ERRORS},
    url_name="job-expected-start",
    summary="The earliest time the job could start, when it can be known",
)
def job_expected_start(request: HttpRequest, job_id: int):
    return _expected(get_job_for_user(request.user, job_id))
