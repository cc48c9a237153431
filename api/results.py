"""A job's result (docs/results.md): the report, one accepted file streamed, and what
differs from another run ("Compare with run…")."""

from typing import Any

from django.http import FileResponse, HttpRequest
from ninja import Query, Router
from pydantic import Field

from accounts.api_auth import ApiError
from api import schemas
from api.jobs import READ_ERRORS
from jobs.access import MAX_ID, get_job_for_user
from jobs.result_reads import accepted_file, result_report, run_comparison
from protocol import limits

router = Router()


class ResultParams(schemas.Schema):
    after: int = Field(0, ge=0, le=2**62, description="Units after this cursor (next_after).")
    limit: int = Field(limits.RESULT_UNITS_PAGE, ge=1, le=1000)


class ResultFile(schemas.Schema):
    path: str
    size: int
    sha256: str
    unit: str


class ResultUnitOut(schemas.Schema):
    unit: str
    items: int
    attempt: int
    accepted_at: str
    files: list[ResultFile]


class ResultUnits(schemas.Schema):
    unit_name: str
    expected: int | None
    accepted: int
    items_expected: int | None
    items_accepted: int
    missing: list[str] = Field(description="Expected ids not accepted (the first 1,000).")
    conflicts: list[str]
    page: list[ResultUnitOut]
    next_after: int | None


class AttemptIdentity(schemas.Schema):
    attempt: int
    rank: int
    image: str
    image_digest: str
    executable: str
    executable_sha256: str
    code_version: str
    inputs_fingerprint: str = Field(
        description="sha256 over the data folders' paths, sizes and modification times, as "
        "the agent found them before the start; empty: the job has none, or too many files."
    )
    inputs_files: int
    inputs_bytes: int
    inputs_sha256: str = Field(
        description="sha256 of the manifest of the data folders' content (every file's "
        "sha256, in sha256sum's format) the agent wrote before the start; empty: the job did "
        "not ask (result_inputs_sha256), or a bound was passed."
    )
    reported_at: str


class RunIdentity(schemas.Schema):
    run_id: str | None
    config: dict
    config_sha256: str | None
    created_at: str | None
    attempts: list[AttemptIdentity]


class Validator(schemas.Schema):
    command: str
    reported: bool  # rank 0's agent reported its outcome (exit_code None until then)
    exit_code: int | None
    output: str


class JobResult(schemas.Schema):
    job: int
    state: str = Field(description="accepted, rejected, unchecked or pending.")
    reason: str
    reason_code: str = Field(description="result_rejected when rejected, else empty.")
    progress: str
    units: ResultUnits
    run: RunIdentity
    files: list[ResultFile] = Field(description="The files of this page's units.")
    validator: Validator | None


@router.get(
    "/{int:job_id}/result",
    response={200: JobResult, **READ_ERRORS},
    url_name="job-result",
    summary="The job's result: verdict, accepted units (paged), files, run identity",
)
def job_result(request: HttpRequest, job_id: int, params: Query[ResultParams]):
    job = get_job_for_user(request.user, job_id)
    return result_report(job, after=params.after, limit=params.limit)


@router.get(
    "/{int:job_id}/result/files/{path:file_path}",
    response={200: None, **READ_ERRORS, 409: schemas.ErrorBody},
    url_name="job-result-file",
    summary="One accepted file of the job's result (never a staging file)",
)
def job_result_file(request: HttpRequest, job_id: int, file_path: str):
    """Streams the file with its recorded sha256 in `X-Checksum-Sha256`. 404: no accepted
    unit names this path; 409 `result_not_reachable`: the console cannot read the node's
    result folder, or the file no longer has its recorded size."""
    job = get_job_for_user(request.user, job_id)
    found = accepted_file(job, file_path)
    if found is None:
        raise ApiError(404, "not_found", "No accepted file of this job has that path.")
    path, entry, problem = found
    if problem:
        raise ApiError(409, "result_not_reachable", problem)
    response = FileResponse(open(path, "rb"), content_type="application/octet-stream")  # noqa: SIM115
    response["Content-Length"] = str(entry["size"])
    response["X-Checksum-Sha256"] = entry["sha256"]
    response["Content-Disposition"] = f'attachment; filename="{path.name}"'
    return response


class CompareParams(schemas.Schema):
    with_job: int = Field(
        ..., alias="with", ge=1, le=MAX_ID, description="The other job (run) to compare with."
    )


class ConfigChange(schemas.Schema):
    key: str = Field(
        description="A setting of the effective configuration (nested: dotted), "
        "or resolved.<image_digest|executable_sha256|code_version|inputs_fingerprint|"
        "inputs_sha256>."
    )
    this: Any = Field(None, description="Its value in this run (null and this_set false: absent).")
    other: Any = Field(None, description="Its value in the other run.")
    this_set: bool
    other_set: bool


class RunComparison(schemas.Schema):
    job: int
    run_id: str
    config_sha256: str
    with_job: int
    with_run_id: str
    with_config_sha256: str
    identical: bool
    changes: list[ConfigChange]


@router.get(
    "/{int:job_id}/compare",
    response={200: RunComparison, **READ_ERRORS},
    url_name="job-compare",
    summary="What differs from another run: configuration key by key, what was resolved",
)
def job_compare(request: HttpRequest, job_id: int, params: Query[CompareParams]):
    """Both jobs must be visible to the caller (404 otherwise). Env values marked secret
    are compared as stored: redacted (docs/results.md)."""
    job = get_job_for_user(request.user, job_id)
    other = get_job_for_user(request.user, params.with_job)
    return run_comparison(job, other)
