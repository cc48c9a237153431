"""Researcher REST API (/api/v1/): thin function views over jobs.forms and jobs.actions.

Authentication, method checks and the error shape live in `accounts.api_auth.api_view`.
Validation of a new job is `jobs.forms.JobForm`, the same as the create page's; the API only
adds JSON strictness on top (types, unknown fields), so a typo is an error, not a default.
"""

from types import NoneType
from typing import Any

from django.db.models import IntegerField, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from accounts.api_auth import ApiError, api_view, json_body
from cluster.models import Node
from jobs import logview
from jobs.access import get_job_for_user, visible_jobs
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.submit import JobStillActive, resubmit_job
from jobs.actions.transitions import TransitionConflict
from jobs.forecast import cached_expected_starts, estimate_json
from jobs.forms import JobForm, initial_from_job
from jobs.models import Job, Pod
from jobs.paging import BadPageRequest, page_of_jobs, parse_limit, parse_statuses
from jobs.serializers import job_json, log_line_json, node_json
from jobs.statuses import ACTIVE_POD_STATUSES, FINAL_JOB_STATUSES, JobStatus

# Accepted JSON types per field of POST /api/v1/jobs (bool is rejected where int is meant).
CREATE_FIELDS: dict[str, tuple[type, ...]] = {
    "quota": (int, str),
    "workspace": (int, str, NoneType),
    "name": (str, NoneType),
    "image": (str,),
    "command": (str,),
    "workers": (int, NoneType),
    "gpus_per_worker": (int, NoneType),
    "cpus_per_worker": (int, NoneType),
    "memory_gb_per_worker": (int, NoneType),
    "priority": (int, NoneType),
    "idle_resources": (str, NoneType),
    "env": (dict, str, NoneType),
    "max_runtime_seconds": (int, NoneType),
    # Automatic Fault Tolerance (same names as the form's fields).
    "fault_tolerance": (bool, NoneType),
    "run_type": (str, NoneType),
    "max_restarts": (int, NoneType),
    "restart_policy": (str, NoneType),
    "hang_detection": (bool, NoneType),
    "hang_timeout": (int, NoneType),
    "hang_action": (str, NoneType),
    "checkpoint_dir": (str, NoneType),
}
_TYPE_NAMES = {
    int: "an integer",
    str: "a string",
    dict: "an object",
    bool: "a boolean",
    NoneType: "null",
}


CHECKPOINTS_SHOWN = 50
EVENTS_SHOWN = 200


def _json_body(request: HttpRequest) -> dict[str, Any]:
    if not request.body:
        return {}
    body = json_body(request.body)
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "The body must be a JSON object.")
    return body


def _check_types(body: dict[str, Any]) -> None:
    errors: dict[str, list[str]] = {}
    for key, value in body.items():
        if key not in CREATE_FIELDS:
            errors[key] = [f"Unknown field {key!r}."]
            continue
        types = CREATE_FIELDS[key]
        # bool is an int in Python: accepted only where a boolean is meant.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            expected = " or ".join(_TYPE_NAMES[t] for t in types)
            errors[key] = [f"{key} must be {expected}."]
    if errors:
        first = next(iter(errors))
        raise ApiError(400, "validation_error", errors[first][0], field=first, fields=errors)


def _form_error(form: JobForm) -> ApiError:
    fields = {name: [str(m) for m in messages] for name, messages in form.errors.items()}
    first = next(iter(fields))
    return ApiError(
        400,
        "validation_error",
        fields[first][0],
        field=None if first == "__all__" else first,
        fields=fields,
    )


def _int_param(request: HttpRequest, name: str, default: int | None, low: int, high: int):
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "validation_error", f"{name} must be an integer.", name) from None
    if not low <= value <= high:
        raise ApiError(400, "validation_error", f"{name} must be between {low} and {high}.", name)
    return value


def _job_with_pods(user, pk: int) -> Job:
    job = get_job_for_user(user, pk)
    job.pod_list = list(
        Pod.objects.filter(job=job)
        .select_related("node", "charged_quota")
        .order_by("attempt", "rank")
    )
    job.restart_list = list(job.restarts.order_by("created_at", "id"))
    job.checkpoint_list = list(job.checkpoints.order_by("-step", "-id")[:CHECKPOINTS_SHOWN])
    newest = job.events.select_related("user").order_by("-created_at", "-id")[:EVENTS_SHOWN]
    job.event_list = list(reversed(newest))
    return job


def _job_response(job: Job, status: int = 200) -> JsonResponse:
    body = job_json(job, job.pod_list)
    body["expected_start"] = _expected_start([job]).get(job.pk)
    return JsonResponse(body, status=status)


def _expected_start(jobs: list[Job]) -> dict[int, dict | None]:
    """jobs.forecast's estimate for the waiting ones (labelled an estimate), else None."""
    waiting = {j.pk for j in jobs if j.status in (JobStatus.PENDING, JobStatus.INQUEUE)}
    estimates = cached_expected_starts(waiting)
    return {j.pk: estimate_json(estimates.get(j.pk)) for j in jobs}


@api_view(["GET", "POST"])
def jobs_collection(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return _create(request)
    try:
        statuses = parse_statuses(request.GET.get("status"))
        limit = parse_limit(request.GET.get("limit"))
        jobs = visible_jobs(request.user)
        if statuses:
            jobs = jobs.filter(status__in=statuses)
        page, next_cursor = page_of_jobs(jobs, cursor=request.GET.get("cursor"), limit=limit)
    except BadPageRequest as exc:
        raise ApiError(400, "validation_error", exc.message, exc.field) from None
    starts = _expected_start(page)
    return JsonResponse(
        {
            "jobs": [job_json(job) | {"expected_start": starts[job.pk]} for job in page],
            "next_cursor": next_cursor,
        }
    )


def _create(request: HttpRequest) -> JsonResponse:
    body = _json_body(request)
    _check_types(body)
    data = {key: value for key, value in body.items() if value is not None}
    form = JobForm(data, user=request.user)
    if not form.is_valid():
        raise _form_error(form)
    job = form.create_job()
    return _job_response(_job_with_pods(request.user, job.pk), status=201)


@api_view(["GET"])
def job_detail(request: HttpRequest, pk: int) -> JsonResponse:
    return _job_response(_job_with_pods(request.user, pk))


@api_view(["GET"])
def job_logs(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_job_for_user(request.user, pk)
    rank = _int_param(request, "rank", 0, 0, 10_000)
    attempt = _int_param(request, "attempt", None, 1, 1_000_000)
    after = _int_param(request, "after", -1, -1, 2**62)
    limit = _int_param(request, "limit", logview.DEFAULT_LIMIT, 1, logview.MAX_LIMIT)
    pod = logview.pick_pod(job, rank=rank, attempt=attempt)
    lines = logview.read_after(pod, after, limit) if pod else []
    complete = logview.logs_complete(
        job_final=job.status in FINAL_JOB_STATUSES,
        finished_at=job.finished_at,
        now=timezone.now(),
        caught_up=len(lines) < limit,
        settle=logview.settle_seconds(),
    )
    return JsonResponse(
        {
            "job": job.pk,
            "rank": pod.rank if pod else rank,
            "attempt": pod.attempt if pod else attempt,
            "lines": [log_line_json(line) for line in lines],
            "next_after": lines[-1].seq if lines else after,
            "complete": complete,
        }
    )


@api_view(["POST"])
def job_stop(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_job_for_user(request.user, pk)
    try:
        request_stop(job, user=request.user)
    except JobNotActive as exc:
        raise ApiError(409, "conflict", f"Cannot stop: {exc}.") from None
    except TransitionConflict:
        raise ApiError(409, "conflict", "The job changed meanwhile; try again.") from None
    return _job_response(_job_with_pods(request.user, pk))


@api_view(["POST"])
def job_restart(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_job_for_user(request.user, pk)
    if job.status not in FINAL_JOB_STATUSES:
        raise ApiError(409, "conflict", f"Cannot restart: the job is still {job.status}.")
    # A restart is a new job: the rules of creation still apply (the quota may have been
    # unbound from the workspace, or the nodes that could run a worker removed).
    form = JobForm(initial_from_job(job), user=request.user)
    if not form.is_valid():
        raise _form_error(form)
    try:
        new_job = resubmit_job(job, user=request.user)
    except JobStillActive as exc:
        raise ApiError(409, "conflict", f"Cannot restart: {exc}.") from None
    return _job_response(_job_with_pods(request.user, new_job.pk), status=201)


@api_view(["GET"])
def nodes_collection(request: HttpRequest) -> JsonResponse:
    """The cluster's nodes and their GPU usage (what researchers need to size a job)."""
    nodes = Node.objects.order_by("name").annotate(
        used=Coalesce(
            Sum("pods__gpus", filter=Q(pods__status__in=[s.value for s in ACTIVE_POD_STATUSES])),
            Value(0),
            output_field=IntegerField(),
        )
    )
    return JsonResponse({"nodes": [node_json(node) for node in nodes]})
