"""Job templates on the pages (docs/templates.md): "Save as template" on a job's page, the
Templates page (the user's workspaces' templates: use one, delete one). The create page
pre-fills from one (`?template=<id>`, `web.views_create`)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from jobs.access import get_job_for_user
from jobs.actions.templates import TemplateTaken, delete_template, save_template
from jobs.templates import (
    TemplateProblem,
    check_name,
    fields_from_job,
    get_template_for_user,
    visible_templates,
)
from protocol import limits
from quotas.access import managed_tenant_ids


@login_required
@require_POST
def job_save_template(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_job_for_user(request.user, pk)
    try:
        name = check_name(request.POST.get("template_name", "").strip())
        template = save_template(
            workspace=job.workspace, name=name, fields=fields_from_job(job), user=request.user
        )
    except (TemplateProblem, TemplateTaken) as exc:
        messages.error(request, f"Not saved: {getattr(exc, 'message', exc)}")
        return redirect("web:detail", pk=job.pk)
    messages.success(request, f"Saved as template {template.name!r} of {job.workspace.name}.")
    return redirect("web:detail", pk=job.pk)


@login_required
@require_GET
def template_list(request: HttpRequest) -> HttpResponse:
    """Every template of the user's workspaces by name, with who may delete each (its
    creator, the workspace's tenant's owners). Two queries, whatever the count."""
    owned = managed_tenant_ids(request.user)
    rows = (
        visible_templates(request.user)
        .select_related("workspace", "created_by")
        .order_by("name", "workspace__name", "pk")[: limits.TEMPLATES_LISTED]
    )
    templates = [
        {
            "template": row,
            "summary": _summary(row.fields),
            "may_delete": row.created_by_id == request.user.pk or row.workspace.tenant_id in owned,
        }
        for row in rows
    ]
    return render(
        request,
        "web/jobs/templates.html",
        {"templates": templates, "shown_at_most": limits.TEMPLATES_LISTED},
    )


def _summary(fields: dict) -> str:
    """What a template runs, in a line: image, workers x GPUs each."""
    workers, gpus = fields.get("workers", 1), fields.get("gpus_per_worker", 0)
    return f"{fields.get('image', '')} · workers {workers}, GPUs each {gpus}"


@login_required
@require_POST
def template_delete(request: HttpRequest, pk: int) -> HttpResponse:
    template, may_delete = get_template_for_user(request.user, pk)  # else 404
    if not may_delete:
        raise PermissionDenied("Only its creator or the workspace's owners delete it.")
    delete_template(template)
    messages.success(request, f"Template {template.name!r} of {template.workspace.name} deleted.")
    return redirect("web:templates")


def template_initial(user, template_id: str) -> dict:
    """The create page's values from a template the user sees (else 404)."""
    template, _ = get_template_for_user(user, template_id)
    initial = {**template.fields, "workspace": str(template.workspace_id)}
    quota = str(initial.get("quota", ""))
    if quota and not quota.isdigit():  # saved by name (the API's fields): the picker's id
        named = template.workspace.quotas.filter(name=quota).values_list("pk", flat=True)
        initial["quota"] = str(named[0]) if named else ""
    return initial


def template_choices(user) -> list[tuple[int, str]]:
    """The templates the create page's picker offers: (id, "name (workspace)")."""
    rows = visible_templates(user).select_related("workspace").order_by("name", "pk")[:200]
    return [(row.pk, f"{row.name} ({row.workspace.name})") for row in rows]
