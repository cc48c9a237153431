"""Job templates (docs/templates.md): who sees which, what a new one holds, and the fields
a submission from one sends. Writes are `jobs.actions.templates`'.

A template belongs to a workspace: its members (and the tenant's owners) see and use it;
its creator and the tenant's owners delete it; anyone else gets a 404.
"""

import re
from typing import Any

from django.http import Http404

from jobs.access import MAX_ID, member_workspace_ids
from jobs.models import JobTemplate
from policy.jobspec import FIELDS, JobSpec, fields_of_job
from policy.secrets import redacted_fields
from protocol import limits
from quotas.access import HiddenObject, get_workspace_for_user

NAME_RE = re.compile(limits.TEMPLATE_NAME_PATTERN)
# What a template keeps: every field but the workspace (the template's own).
KEPT = tuple(f.name for f in FIELDS if f.name != "workspace")


class TemplateProblem(Exception):
    """A template cannot be saved or used: the field at fault and why."""

    def __init__(self, field: str, message: str, fields: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.field, self.message = field, message
        self.fields = fields or {field: [message]}


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise TemplateProblem(
            "name",
            "A template's name is 1 to 100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit.",
        )
    return name


def fields_from_job(job) -> dict[str, Any]:
    """The fields that would submit `job` again (a clone's: not its checkpoint folder), its
    secrets' values left out (policy.secrets: a template is read by the whole workspace)."""
    fields = redacted_fields(fields_of_job(job))
    return {name: fields[name] for name in KEPT if name in fields}


def fields_from_json(raw: Any) -> dict[str, Any]:
    """Fields as a client sends them → the complete fields a template keeps, read by the
    job's own rules (the quota is checked when a job is submitted from it)."""
    if not isinstance(raw, dict):
        raise TemplateProblem("fields", "fields must be an object of a job's fields.")
    unknown = sorted(set(raw) - set(KEPT))
    if unknown:
        where = f"fields.{unknown[0][:100]}"
        raise TemplateProblem(where, f"Unknown field {unknown[0][:100]!r}.")
    spec, problems = JobSpec.from_json(raw)
    if problems:
        fields = {f"fields.{name}": list(messages) for name, messages in problems.items()}
        first = next(iter(fields))
        raise TemplateProblem(first, fields[first][0], fields)
    return {"quota": str(raw["quota"]).strip(), **spec.to_fields()}


def visible_templates(user):
    if not user.is_authenticated:
        return JobTemplate.objects.none()
    return JobTemplate.objects.filter(workspace_id__in=member_workspace_ids(user))


def get_template_for_user(user, pk: int | str) -> tuple[JobTemplate, bool]:
    """The template and whether the user may delete it (its creator, the tenant's owners);
    404 unless the user sees its workspace."""
    pk = int(pk)
    found = (
        JobTemplate.objects.select_related("workspace", "created_by").filter(pk=pk).first()
        if 0 < pk <= MAX_ID
        else None
    )
    if found is None:
        raise Http404("No such template")
    try:
        _, owner = get_workspace_for_user(user, found.workspace_id)
    except Http404:
        raise HiddenObject("No such template", "template", pk) from None
    return found, owner or found.created_by_id == user.pk


def _named(user, name: str, workspace: Any) -> JobTemplate:
    found = visible_templates(user).filter(name=name).select_related("workspace")
    if workspace not in (None, ""):
        ref = str(workspace).strip()
        found = (
            found.filter(workspace_id=int(ref))
            if ref.isdigit()
            else found.filter(workspace__name=ref)
        )
    found = list(found[:2])
    if not found:
        raise TemplateProblem("template", f"None of your workspaces has a template {name[:100]!r}.")
    if len(found) > 1:
        raise TemplateProblem(
            "template",
            f"Several of your workspaces have a template {name[:100]!r}: give the workspace.",
        )
    return found[0]


def submitted_fields(user, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The fields a submission `{"template": name, ...overrides}` sends: the template's,
    each given field replacing its own (a whole value: env too), in its workspace."""
    template = _named(user, name, overrides.get("workspace"))
    return {
        **template.fields,
        "workspace": str(template.workspace_id),
        **{key: value for key, value in overrides.items() if key != "workspace"},
    }
