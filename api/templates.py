"""Job templates (docs/templates.md): a workspace's list, save (from fields or a job), get,
delete. Submitting from one is `POST /jobs` with `{"template": name, ...}` (api.jobs).
Reads and access are `jobs.templates`'; writes `jobs.actions.templates`'."""

from typing import Any

from django.http import Http404, HttpRequest
from ninja import Router, Status

from accounts.api_auth import ApiError
from api import schemas, template_schemas
from api.owners import _workspace
from jobs.access import get_job_for_user
from jobs.actions.templates import TemplateTaken, delete_template, save_template
from jobs.models import JobTemplate
from jobs.templates import (
    TemplateProblem,
    check_name,
    fields_from_job,
    fields_from_json,
    get_template_for_user,
)
from protocol import limits

router = Router()
E = schemas.ErrorBody
READ_ERRORS = {400: E, 401: E, 404: E, 429: E}
WRITE_ERRORS = {400: E, 401: E, 403: E, 404: E, 409: E, 413: E, 429: E}


def problem_error(problem: TemplateProblem) -> ApiError:
    return ApiError(400, "validation_error", problem.message, problem.field, problem.fields)


def template_json(template: JobTemplate) -> dict[str, Any]:
    creator = template.created_by
    return {
        "id": template.pk,
        "name": template.name,
        "workspace": {"id": template.workspace_id, "name": template.workspace.name},
        "fields": template.fields,
        "created_by": creator.get_username() if creator else None,
        "created_at": template.created_at,
    }


@router.get(
    "/workspaces/{ref}/templates",
    response={200: template_schemas.TemplateList, **READ_ERRORS},
    url_name="workspace-templates",
    summary="A workspace's job templates",
)
def list_templates(request: HttpRequest, ref: str):
    workspace, _ = _workspace(request.user, ref)
    rows = workspace.job_templates.select_related("created_by").order_by("name")
    for row in rows:
        row.workspace = workspace
    return {"templates": [template_json(row) for row in rows]}


def _fields(request: HttpRequest, workspace, payload) -> dict[str, Any]:
    if (payload.fields is None) == (payload.from_job is None):
        raise ApiError(400, "validation_error", "Give either fields or from_job.", "fields")
    if payload.fields is not None:
        return fields_from_json(payload.fields)
    try:
        job = get_job_for_user(request.user, payload.from_job)
    except (Http404, ValueError):
        raise ApiError(404, "not_found", f"No job {payload.from_job}.", "from_job") from None
    if job.workspace_id != workspace.pk:
        raise ApiError(
            400, "validation_error", f"Job {job.pk} is not in {workspace.name}.", "from_job"
        )
    return fields_from_job(job)


@router.post(
    "/workspaces/{ref}/templates",
    response={201: template_schemas.Template, **WRITE_ERRORS},
    url_name="workspace-templates-create",
    summary="Save a job template (from a job's fields or from a job)",
)
def create_template(request: HttpRequest, ref: str, payload: template_schemas.TemplateCreate):
    workspace, _ = _workspace(request.user, ref)  # its members and the tenant's owners
    try:
        name = check_name(payload.name)
        fields = _fields(request, workspace, payload)
    except TemplateProblem as problem:
        raise problem_error(problem) from None
    if workspace.job_templates.count() >= limits.TEMPLATES_PER_WORKSPACE:
        raise ApiError(
            409, "conflict", f"{workspace.name} has {limits.TEMPLATES_PER_WORKSPACE} templates."
        )
    try:
        template = save_template(workspace=workspace, name=name, fields=fields, user=request.user)
    except TemplateTaken as exc:
        raise ApiError(409, "conflict", str(exc), "name") from None
    return Status(201, template_json(template))


def _template(request: HttpRequest, template_id: int) -> tuple[JobTemplate, bool]:
    return get_template_for_user(request.user, template_id)  # else 404 (api.main)


@router.get(
    "/templates/{template_id}",
    response={200: template_schemas.Template, **READ_ERRORS},
    url_name="template",
    summary="A job template",
)
def get_template(request: HttpRequest, template_id: int):
    template, _ = _template(request, template_id)
    return template_json(template)


@router.delete(
    "/templates/{template_id}",
    response={204: None, **WRITE_ERRORS},
    url_name="template-delete",
    summary="Delete a job template (its creator or the workspace's owners)",
)
def remove_template(request: HttpRequest, template_id: int):
    template, may_delete = _template(request, template_id)
    if not may_delete:
        raise ApiError(
            403, "permission_denied", "Only its creator or the workspace's owners delete it."
        )
    delete_template(template)
    return Status(204, None)
