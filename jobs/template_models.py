"""Job templates (docs/templates.md): a workspace's named set of a job's submit fields.
Imported by `jobs.models` (Django finds the model there); written only by
`jobs.actions.templates`."""

from django.conf import settings
from django.db import models

from protocol import limits


class JobTemplate(models.Model):
    """The fields that would submit a job again (`policy.jobspec.fields_of_job`'s shape,
    without the workspace: the template's own), under a name unique in its workspace."""

    workspace = models.ForeignKey(
        "quotas.Workspace", on_delete=models.CASCADE, related_name="job_templates"
    )
    name = models.CharField(max_length=limits.TEMPLATE_NAME)
    fields = models.JSONField(default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="job_template_name_unique")
        ]

    def __str__(self) -> str:
        return self.name
