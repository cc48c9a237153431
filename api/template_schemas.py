"""Job templates' request and response shapes (docs/templates.md), and the body of a
single submission, which may name a template (`JobSubmit`)."""

from datetime import datetime
from typing import Any

from pydantic import Field, StrictInt, StrictStr, create_model

from api.schemas import REQUEST_TYPES, JobCreate, Schema, Strict
from policy.jobspec import FIELDS
from protocol import limits

TEMPLATE_NAME = Field(
    description="Unique in its workspace: letters, digits, '.', '_', '-'.",
    json_schema_extra={"maxLength": limits.TEMPLATE_NAME, "pattern": limits.TEMPLATE_NAME_PATTERN},
)


def _optional(name: str) -> tuple[Any, Any]:
    """A field JobCreate requires, optional when a template is named (it may give it)."""
    described = next(f for f in FIELDS if f.name == name)
    info = JobCreate.model_fields[name]
    doc = f"{info.description or ''} Required unless `template` gives it.".strip()
    extra = info.json_schema_extra
    return (
        REQUEST_TYPES[described.kind] | None,
        Field(None, description=doc, json_schema_extra=extra),
    )


JobSubmit = create_model(
    "JobSubmit",
    __base__=JobCreate,
    __doc__="A new job: the create page's fields, or a template's name and the fields that "
    "replace its own (docs/templates.md).",
    template=(
        StrictStr | None,
        Field(
            None,
            description="A template of one of your workspaces (give `workspace` when several "
            "have this name): its fields, each given field replacing its own.",
            json_schema_extra={"maxLength": limits.TEMPLATE_NAME},
        ),
    ),
    **{f.name: _optional(f.name) for f in FIELDS if f.required},
)


class TemplateCreate(Strict):
    name: StrictStr = TEMPLATE_NAME
    fields: dict[str, Any] | None = Field(
        None, description="A job's fields (as POST /jobs takes them; not its workspace)."
    )
    from_job: StrictInt | None = Field(
        None, description="A job of this workspace: the fields that would submit it again."
    )


class Template(Schema):
    id: int
    name: str
    workspace: dict[str, Any]
    fields: dict[str, Any]
    created_by: str | None
    created_at: datetime


class TemplateList(Schema):
    templates: list[Template]
