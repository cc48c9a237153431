"""Every write to job templates (docs/templates.md): save one, delete one."""

from django.db import IntegrityError, transaction

from jobs.models import JobTemplate


class TemplateTaken(Exception):
    """The workspace already has a template of this name."""


def save_template(*, workspace, name: str, fields: dict, user) -> JobTemplate:
    """A new template (the caller checked the name and the fields); `TemplateTaken` when
    the workspace has one of this name (the unique constraint decides, no race)."""
    try:
        with transaction.atomic():
            return JobTemplate.objects.create(
                workspace=workspace, name=name, fields=dict(fields), created_by=user
            )
    except IntegrityError:
        raise TemplateTaken(f"{workspace.name} already has a template named {name!r}.") from None


def delete_template(template: JobTemplate) -> None:
    JobTemplate.objects.filter(pk=template.pk).delete()
