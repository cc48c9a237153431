"""Jobs: create (one, a batch, an array), list with filters, get, stop, restart, terminate.

Every new job is checked by `jobs.admission` (the create page's rules too); the API adds
only JSON strictness (api.schemas). Writes go through jobs.actions.
"""

from dataclasses import replace
from typing import Any

import pydantic
from django.http import HttpRequest, HttpResponse
from ninja import Header, Query, Router, Status

from accounts.api_auth import ApiError
from api import idempotency, schemas
from api.idempotency import Outcome
from api.job_filters import ListParams, filtered_jobs
from api.parsing import reject_unknown_query, restart_options
from api.serializers import expected_start_json, job_json
from api.template_schemas import JobSubmit
from api.validation import field_messages
from jobs.access import MAX_ID, get_job_for_user, visible_jobs
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.submit import JobStillActive, ResumeRefused, create_jobs, resubmit_job
from jobs.actions.submit import create_job as submit_job
from jobs.actions.transitions import TransitionConflict
from jobs.admission.facts import Checked, FactsLoader, check_job
from jobs.folders import FolderRaced, FolderTaken, array_folders, output_dir_of
from jobs.models import Job, Pod
from jobs.paging import BadPageRequest, page_of_jobs
from jobs.templates import TemplateProblem, submitted_fields
from policy.admission.rules import ALL, add_problem
from policy.admission.values import Problem
from policy.jobspec import Kind, fields_by_kind, fields_of_job
from policy.statuses import FINAL_JOB_STATUSES, JobStatus
from protocol import limits

router = Router()

CHECKPOINTS_SHOWN = 50
E = schemas.ErrorBody
READ_ERRORS = {400: E, 401: E, 404: E, 429: E}
WRITE_ERRORS = {400: E, 401: E, 404: E, 409: E, 413: E, 422: E, 429: E}
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
    # Never one whose files are gone (pruned: the agent's scan no longer finds it).
    live = job.checkpoints.filter(pruned_at__isnull=True)
    job.checkpoint_list = list(live.order_by("-step", "-id")[:CHECKPOINTS_SHOWN])
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
    payload: schemas.JobCreate | dict[str, Any],
    extra_env=None,
    loader: FactsLoader | None = None,
) -> Checked:
    data = payload if isinstance(payload, dict) else payload.model_dump(exclude_none=True)
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
    payload: JobSubmit,
    idempotency_key: str | None = IdempotencyKey,
):
    """The job's fields, or a template's name and the fields that replace its own
    (docs/templates.md): either way checked exactly as the create page checks them."""

    def create() -> Outcome:
        data = payload.model_dump(exclude_none=True)
        name = data.pop("template", None)
        if name is not None:
            try:
                data = submitted_fields(request.user, name, data)
            except TemplateProblem as problem:
                raise ApiError(400, "validation_error", problem.message, problem.field) from None
        checked = checked_job(request, data)
        if not checked.ok:
            raise problems_error(checked)
        try:
            job = submit_job(
                user=request.user,
                workspace=checked.workspace,
                quota=checked.quota,
                spec=checked.spec(),
            )
        except FolderRaced as exc:  # taken by a submission that committed meanwhile
            raise ApiError(400, "validation_error", str(exc), exc.field) from None
        return Outcome(jobs=[job])

    outcome = idempotency.once(request, create)
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
        if not outcome.replayed_ids:
            raise ApiError(404, "not_found", "The job this key created no longer exists.")
        return Status(201, detail_json(request.user, outcome.replayed_ids[0]))
    return Status(201, submitted_json(outcome.jobs[0]))


def item_type_error(item: Any, exc: pydantic.ValidationError) -> dict:
    """A batch item's JSON-type errors, worded as for a single job (its fields unprefixed)."""
    if isinstance(item, dict):
        fields = field_messages({**e, "loc": ("item", *e["loc"])} for e in exc.errors())
    else:
        fields = {"__all__": ["A job must be a JSON object."]}
    first = next(iter(fields))
    return {
        "code": "validation_error",
        "message": fields[first][0],
        "field": None if first == "__all__" else first,
        "fields": fields,
    }


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
        items, errors, indexes = [], [], []
        loader = FactsLoader(request.user)  # the quotas, workspaces and pools: once a batch
        for index, item in enumerate(payload.jobs):
            try:  # item by item: one of the wrong JSON type is refused alone
                spec = schemas.JobCreate.model_validate(item)
            except pydantic.ValidationError as exc:
                errors.append({"index": index, "error": item_type_error(item, exc)})
                continue
            checked = checked_job(request, spec, loader=loader)
            if checked.ok:
                items.append((checked.workspace, checked.quota, checked.spec()))
                indexes.append(index)
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
                f"jobs.{e['index']}" + ("" if name == "__all__" else f".{name}"): messages
                for e in errors
                for name, messages in (e["error"]["fields"] or {}).items()
            }
            where = f"jobs.{errors[0]['index']}"
            raise ApiError(400, "validation_error", f"{where}: {first['message']}", where, fields)
        try:
            return Outcome(jobs=create_jobs(user=request.user, items=items), errors=errors)
        except FolderRaced as exc:  # nothing created: the caller submits the batch again
            where = f"jobs.{indexes[exc.index]}.{exc.field}"
            raise ApiError(400, "validation_error", f"{where}: {exc}", where) from None

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
            output = output_dir_of(template)  # copy i: <output>/<i>, as its checkpoints
            where = (checked.workspace.pk, template.checkpoint_dir, payload.count, output)
            folders = array_folders(*where)
        except FolderTaken as exc:
            raise ApiError(400, "validation_error", str(exc), f"job.{exc.field}") from None
        items = []
        for index in range(payload.count):
            spec = replace(
                template,
                env={**template.env, "ARRAY_INDEX": str(index)},
                name=f"{template.name[:190]}-{index}",
                checkpoint_dir=folders[index][0],
                result_contract={**template.result_contract, "output_dir": folders[index][1]},
            )
            items.append((checked.workspace, checked.quota, spec))
        try:
            return Outcome(jobs=create_jobs(user=request.user, items=items))
        except FolderRaced as exc:
            raise ApiError(400, "validation_error", str(exc), f"job.{exc.field}") from None

    outcome = idempotency.once(request, create)
    jobs = _created(request, response, outcome)
    return Status(201, {"jobs": [job_json(job) for job in jobs]})


# -- read ----------------------------------------------------------------------------------


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
    description='Optional body {"result_inputs": "<version>", "from_scratch": false}: the '
    "inputs changed (refused 409 resume_refused while units accepted from other inputs "
    "would carry), or resume nothing: a folder of its own, no checkpoint, no units carried "
    "(docs/results.md).",
)
def restart_job(
    request: HttpRequest,
    response: HttpResponse,
    job_id: int,
    idempotency_key: str | None = IdempotencyKey,
):
    job = get_job_for_user(request.user, job_id)
    options = restart_options(request)

    def create() -> Outcome:
        if job.status not in FINAL_JOB_STATUSES:
            raise ApiError(409, "conflict", f"Cannot restart: the job is still {job.status}.")
        # A restart is a new job: the rules of creation still apply (the quota may have
        # been unbound from the workspace, or the nodes that could run a worker removed).
        checked = check_job(fields_of_job(job), request.user)
        if not checked.ok:
            raise problems_error(checked)
        try:
            new_job = resubmit_job(
                job,
                user=request.user,
                inputs=options.inputs,
                from_scratch=options.from_scratch,
            )
            return Outcome(jobs=[new_job])
        except JobStillActive as exc:
            raise ApiError(409, "conflict", f"Cannot restart: {exc}.") from None
        except ResumeRefused as exc:
            raise ApiError(409, "resume_refused", f"Cannot restart: {exc}") from None
        except Problem as exc:
            raise ApiError(400, "validation_error", str(exc), "result_inputs") from None

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
