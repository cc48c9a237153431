"""Jobs: create (one, a batch, an array), list with filters, get, stop, restart, terminate.

Every new job is checked by `jobs.admission` (the create page's rules too); the API adds
only JSON strictness (api.schemas). Writes go through jobs.actions.
"""

import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Header, Query, Router, Status
from pydantic import Field

from accounts.api_auth import ApiError
from api import idempotency, schemas
from api.idempotency import Outcome
from api.parsing import reject_unknown_query
from api.serializers import expected_start_json, job_json
from jobs.access import MAX_ID, get_job_for_user, visible_jobs
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.submit import JobStillActive, create_jobs, resubmit_job
from jobs.actions.submit import create_job as submit_job
from jobs.actions.transitions import TransitionConflict
from jobs.admission.facts import Checked, FactsLoader, check_job
from jobs.filters import PLACEMENTS, SINCE, JobFilters, filter_jobs, with_live_resources
from jobs.folders import FolderTaken, array_folders
from jobs.models import Job, Pod
from jobs.paging import DEFAULT_SORT, MAX_PAGE, SORTS, BadPageRequest, page_of_jobs, parse_statuses
from policy.admission.rules import ALL, add_problem
from policy.jobspec import Kind, fields_by_kind, fields_of_job
from policy.statuses import FINAL_JOB_STATUSES, IdleResources, JobStatus
from protocol import limits

router = Router()

CHECKPOINTS_SHOWN = 50
E = schemas.ErrorBody
READ_ERRORS = {400: E, 401: E, 404: E, 429: E}
WRITE_ERRORS = {400: E, 401: E, 404: E, 409: E, 413: E, 422: E, 429: E}
DATE_TIME = {"format": "date-time"}
IdempotencyKey = Header(
    None,
    alias="Idempotency-Key",
    description="Any unique string (a UUID): a retry with the same key and body returns "
    "the first request's jobs instead of creating new ones.",
)


def with_details(job: Job) -> Job:
    """The job with its workers, restarts, newest checkpoints and events loaded."""
    job.pod_list = list(
        Pod.objects.filter(job=job)
        .select_related("node", "charged_quota")
        .order_by("attempt", "rank")
    )
    job.restart_list = list(job.restarts.order_by("created_at", "id"))
    job.checkpoint_list = list(job.checkpoints.order_by("-step", "-id")[:CHECKPOINTS_SHOWN])
    newest = job.events.select_related("user").order_by("-created_at", "-id")[: limits.EVENTS_SHOWN]
    job.event_list = list(reversed(newest))
    return job


def job_detail(user, pk: int) -> Job:
    return with_details(get_job_for_user(user, pk))


def detail_json(user, pk: int) -> dict[str, Any]:
    job = job_detail(user, pk)
    return job_json(job, job.pod_list) | {"expected_start": expected_start_json([job])[job.pk]}


# A new job's start is not estimated in the response to its submission (a what-if run of
# the scheduler over every waiting job would cost more than the submission itself, and the
# real scheduler is asked to place it as the response goes out): GET the job for it.
AT_SUBMISSION = {"estimate": True, "at": None, "basis": "not estimated at submission"}


def submitted_json(job: Job) -> dict[str, Any]:
    """The detail of a job this request just created, from the rows it wrote (no read
    back): no workers, restarts or checkpoints yet, one event."""
    job.restart_list, job.checkpoint_list = [], []
    job.event_list = [job.submitted_event]
    return job_json(job, []) | {"expected_start": AT_SUBMISSION}


def problems_error(checked: Checked, prefix: str = "") -> ApiError:
    fields = {
        (f"{prefix}{name}" if name != ALL else prefix.rstrip(".") or name): list(messages)
        for name, messages in checked.problems.items()
    }
    first = next(iter(fields))
    return ApiError(
        400,
        "validation_error",
        fields[first][0],
        field=None if first == "__all__" else first,
        fields=fields,
    )


# The page's "not chosen" is "" (the form's default); the API's is an absent field, and its
# document lists only the values, so "" is an error here, not the default.
CHOICE_FIELDS = {
    f.name: [str(choice.value) for choice in f.choices] for f in fields_by_kind(Kind.CHOICE)
}


def checked_job(
    request: HttpRequest,
    payload: schemas.JobCreate,
    extra_env=None,
    loader: FactsLoader | None = None,
) -> Checked:
    data = payload.model_dump(exclude_none=True)
    if extra_env:
        env = data.get("env") or {}
        if isinstance(env, str):
            env = "\n".join([env, *(f"{k}={v}" for k, v in extra_env.items())])
        else:
            env = {**env, **extra_env}
        data["env"] = env
    checked = check_job(data, request.user, loader=loader)
    for name, choices in CHOICE_FIELDS.items():
        if data.get(name) == "":
            add_problem(checked.verdict, name, f"Choose one of: {', '.join(choices)}.")
    return checked


# -- create --------------------------------------------------------------------------------


def _created(request: HttpRequest, response: HttpResponse, outcome: Outcome) -> list[Job]:
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
        jobs = visible_jobs(request.user).filter(pk__in=outcome.replayed_ids)
        return sorted(jobs, key=lambda job: outcome.replayed_ids.index(job.pk))
    return outcome.jobs


@router.post(
    "",
    response={201: schemas.JobDetail, **WRITE_ERRORS},
    url_name="jobs-create",
    summary="Submit a job",
)
def create_job(
    request: HttpRequest,
    response: HttpResponse,
    payload: schemas.JobCreate,
    idempotency_key: str | None = IdempotencyKey,
):
    def create() -> Outcome:
        checked = checked_job(request, payload)
        if not checked.ok:
            raise problems_error(checked)
        job = submit_job(
            user=request.user,
            workspace=checked.workspace,
            quota=checked.quota,
            spec=checked.spec(),
        )
        return Outcome(jobs=[job])

    outcome = idempotency.once(request, create)
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
        if not outcome.replayed_ids:
            raise ApiError(404, "not_found", "The job this key created no longer exists.")
        return Status(201, detail_json(request.user, outcome.replayed_ids[0]))
    return Status(201, submitted_json(outcome.jobs[0]))


@router.post(
    "/batch",
    response={201: schemas.BatchResult, **WRITE_ERRORS},
    url_name="jobs-batch",
    summary="Submit independent jobs at once",
)
def create_batch(
    request: HttpRequest,
    response: HttpResponse,
    payload: schemas.JobBatchCreate,
    idempotency_key: str | None = IdempotencyKey,
):
    """Each job is validated on its own: the valid ones are created (in one transaction)
    and each invalid one is reported by its index. All invalid: 400."""

    def create() -> Outcome:
        items, errors = [], []
        loader = FactsLoader(request.user)  # the quotas, workspaces and pools: once a batch
        for index, spec in enumerate(payload.jobs):
            checked = checked_job(request, spec, loader=loader)
            if checked.ok:
                items.append((checked.workspace, checked.quota, checked.spec()))
            else:
                error = problems_error(checked)
                errors.append(
                    {
                        "index": index,
                        "error": {
                            "code": error.code,
                            "message": error.message,
                            "field": error.field,
                            "fields": error.fields,
                        },
                    }
                )
        if not items:
            first = errors[0]["error"]
            fields = {
                f"jobs.{e['index']}.{name}": messages
                for e in errors
                for name, messages in (e["error"]["fields"] or {}).items()
            }
            where = f"jobs.{errors[0]['index']}"
            raise ApiError(400, "validation_error", f"{where}: {first['message']}", where, fields)
        return Outcome(jobs=create_jobs(user=request.user, items=items), errors=errors)

    outcome = idempotency.once(request, create)
    jobs = _created(request, response, outcome)
    return Status(201, {"jobs": [job_json(job) for job in jobs], "errors": outcome.errors})


@router.post(
    "/array",
    response={201: schemas.JobList, **WRITE_ERRORS},
    url_name="jobs-array",
    summary="Submit an array of jobs (a sweep)",
)
def create_array(
    request: HttpRequest,
    response: HttpResponse,
    payload: schemas.JobArrayCreate,
    idempotency_key: str | None = IdempotencyKey,
):
    """`count` copies of one job, validated once; copy i gets ARRAY_INDEX=i and
    ARRAY_COUNT=count in its environment (use them to pick the sweep's parameters) and is
    named "<name>-<i>". All are created in one transaction, or none."""
    if not 1 <= payload.count <= schemas.MAX_BATCH:
        raise ApiError(
            400, "validation_error", f"count must be between 1 and {schemas.MAX_BATCH}.", "count"
        )

    def create() -> Outcome:
        extra = {"ARRAY_INDEX": "0", "ARRAY_COUNT": str(payload.count)}
        checked = checked_job(request, payload.job, extra_env=extra)
        if not checked.ok:
            raise problems_error(checked, prefix="job.")
        template = checked.spec()
        try:
            folders = array_folders(checked.workspace.pk, template.checkpoint_dir, payload.count)
        except FolderTaken as exc:
            raise ApiError(400, "validation_error", str(exc), "job.checkpoint_dir") from None
        items = []
        for index in range(payload.count):
            spec = replace(
                template,
                env={**template.env, "ARRAY_INDEX": str(index)},
                name=f"{template.name[:190]}-{index}",
                checkpoint_dir=folders[index],
            )
            items.append((checked.workspace, checked.quota, spec))
        return Outcome(jobs=create_jobs(user=request.user, items=items))

    outcome = idempotency.once(request, create)
    jobs = _created(request, response, outcome)
    return Status(201, {"jobs": [job_json(job) for job in jobs]})


# -- read ----------------------------------------------------------------------------------


class ListParams(schemas.Schema):
    status: str | None = Field(
        None, description="Comma-separated statuses, e.g. Pending,Inqueue.", max_length=200
    )
    state: str | None = Field(
        None, description="active or finished.", json_schema_extra={"enum": ["active", "finished"]}
    )
    quota: str | None = Field(None, description="Quota name or id.", max_length=200)
    workspace: str | None = Field(None, description="Workspace name or id.", max_length=200)
    owner: str | None = Field(None, description='A username, or "me".', max_length=150)
    name: str | None = Field(None, description="Part of the job name.", max_length=200)
    q: str | None = Field(None, description="Part of the job name or command.", max_length=200)
    idle: str | None = Field(
        None,
        description="Idle Resources mode.",
        json_schema_extra={"enum": [m.value for m in IdleResources]},
    )
    placement: str | None = Field(
        None,
        description="Jobs with a worker In Quota, or Not in Quota, now.",
        json_schema_extra={"enum": list(PLACEMENTS)},
    )
    since: str | None = Field(
        None, description="Submitted in the last …", json_schema_extra={"enum": list(SINCE)}
    )
    sort: str | None = Field(None, description="Order.", json_schema_extra={"enum": list(SORTS)})
    created_after: str | None = Field(
        None, description="RFC 3339, e.g. 2026-03-01T12:00:00Z.", json_schema_extra=DATE_TIME
    )
    created_before: str | None = Field(None, json_schema_extra=DATE_TIME)
    cursor: str | None = Field(None, max_length=200, description="next_cursor of a page.")
    limit: int = Field(50, ge=1, le=MAX_PAGE)


RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def _moment(value: str | None, name: str) -> datetime | None:
    """An RFC 3339 date-time (with its offset), strictly: numbers and bare dates are not."""
    if value is None:
        return None
    try:
        if not RFC3339.fullmatch(value):
            raise ValueError(value)
        # In UTC: RFC 3339 allows offsets up to ±23:59, PostgreSQL only ±15:59.
        return datetime.fromisoformat(value.replace("z", "Z")).astimezone(UTC)
    except (ValueError, OverflowError):
        raise BadPageRequest(
            name, f"{name} must be an RFC 3339 date-time with an offset."
        ) from None


def filtered_jobs(request: HttpRequest, params: ListParams) -> tuple[QuerySet[Job], str]:
    """The page's filters (jobs.filters), from the API's typed parameters."""
    for name, choices in (
        ("state", ("active", "finished")),
        ("idle", [m.value for m in IdleResources]),
        ("placement", list(PLACEMENTS)),
        ("since", list(SINCE)),
        ("sort", list(SORTS)),
    ):
        value = getattr(params, name)
        if value is not None and value not in choices:
            raise BadPageRequest(name, f"{name} must be one of: {', '.join(choices)}.")
    filters = JobFilters(
        statuses=tuple(parse_statuses(params.status)),
        state=params.state or "",
        quota=(params.quota or "").strip(),
        workspace=(params.workspace or "").strip(),
        owner=(params.owner or "").strip(),
        idle=params.idle or "",
        placement=params.placement or "",
        since=params.since or "",
        search=(params.q or "").strip(),
        name=(params.name or "").strip(),
        created_after=_moment(params.created_after, "created_after"),
        created_before=_moment(params.created_before, "created_before"),
        sort=params.sort or DEFAULT_SORT,
    )
    jobs = filter_jobs(visible_jobs(request.user), filters, user=request.user, now=timezone.now())
    return with_live_resources(jobs), filters.sort


@router.get(
    "", response={200: schemas.JobPage, **READ_ERRORS}, url_name="jobs", summary="List jobs"
)
def list_jobs(request: HttpRequest, params: Query[ListParams]):
    """Your workspaces' jobs, newest first, a page at a time (follow `next_cursor`)."""
    reject_unknown_query(request, ListParams)
    try:
        jobs, sort = filtered_jobs(request, params)
        page, next_cursor = page_of_jobs(jobs, cursor=params.cursor, limit=params.limit, sort=sort)
    except BadPageRequest as exc:
        raise ApiError(400, "validation_error", exc.message, exc.field) from None
    starts = expected_start_json(page)
    return {
        "jobs": [job_json(job) | {"expected_start": starts[job.pk]} for job in page],
        "next_cursor": next_cursor,
    }


@router.get(
    "/{int:job_id}",
    response={200: schemas.JobDetail, **READ_ERRORS},
    url_name="job",
    summary="A job with its workers, restarts, events and checkpoints",
)
def get_job(request: HttpRequest, job_id: int):
    return detail_json(request.user, job_id)


# -- change --------------------------------------------------------------------------------


@router.post(
    "/{int:job_id}/stop",
    response={200: schemas.JobDetail, **WRITE_ERRORS},
    url_name="job-stop",
    summary="Stop a job gracefully",
)
def stop_job(request: HttpRequest, job_id: int):
    """SIGTERM, the grace period, then SIGKILL; the job ends Stopped. Stopping a job that is
    already stopping is not an error."""
    job = get_job_for_user(request.user, job_id)
    try:
        request_stop(job, user=request.user)
    except JobNotActive as exc:
        raise ApiError(409, "conflict", f"Cannot stop: {exc}.") from None
    except TransitionConflict:
        raise ApiError(409, "conflict", "The job changed meanwhile; try again.") from None
    return detail_json(request.user, job_id)


@router.post(
    "/{int:job_id}/restart",
    response={201: schemas.JobDetail, **WRITE_ERRORS},
    url_name="job-restart",
    summary="Restart (clone) a finished job as a new job",
)
def restart_job(
    request: HttpRequest,
    response: HttpResponse,
    job_id: int,
    idempotency_key: str | None = IdempotencyKey,
):
    job = get_job_for_user(request.user, job_id)

    def create() -> Outcome:
        if job.status not in FINAL_JOB_STATUSES:
            raise ApiError(409, "conflict", f"Cannot restart: the job is still {job.status}.")
        # A restart is a new job: the rules of creation still apply (the quota may have
        # been unbound from the workspace, or the nodes that could run a worker removed).
        checked = check_job(fields_of_job(job), request.user)
        if not checked.ok:
            raise problems_error(checked)
        try:
            return Outcome(jobs=[resubmit_job(job, user=request.user)])
        except JobStillActive as exc:
            raise ApiError(409, "conflict", f"Cannot restart: {exc}.") from None

    outcome = idempotency.once(request, create)
    jobs = _created(request, response, outcome)
    if not jobs:
        raise ApiError(404, "not_found", "The job this key created no longer exists.")
    return Status(201, detail_json(request.user, jobs[0].pk))


def is_admin(user) -> bool:
    return user.is_active and (
        user.is_superuser or (user.is_staff and user.has_perm("jobs.view_job"))
    )


@router.post(
    "/{int:job_id}/terminate",
    response={200: schemas.JobDetail, 403: E, **WRITE_ERRORS},
    url_name="job-terminate",
    summary="Terminate a job at once (admins)",
)
def terminate_job(request: HttpRequest, job_id: int):
    """No grace period: workers are killed and the job ends Terminated. For admins; any
    job of the cluster."""
    if not is_admin(request.user):
        get_job_for_user(request.user, job_id)  # 404 for jobs the caller cannot see
        raise ApiError(403, "permission_denied", "Only admins can terminate jobs.")
    if not 0 < job_id <= MAX_ID:
        raise ApiError(404, "not_found", "No such object.")
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise ApiError(404, "not_found", "No such object.")
    try:
        request_stop(
            job,
            user=request.user,
            reason=f"terminated by admin {request.user.get_username()}",
            final_status=JobStatus.TERMINATED,
        )
    except JobNotActive as exc:
        raise ApiError(409, "conflict", f"Cannot terminate: {exc}.") from None
    except TransitionConflict:
        raise ApiError(409, "conflict", "The job changed meanwhile; try again.") from None
    job = with_details(Job.objects.select_related("workspace", "quota", "owner").get(pk=job_id))
    return job_json(job, job.pod_list)
