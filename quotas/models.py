"""Tenants, workspaces with members, and the quotas bound to them (DESIGN §3)."""

from django.conf import settings
from django.db import models
from django.db.models import Q


class ResourceType(models.TextChoices):
    GENERAL_PURPOSE = "General-purpose", "General-purpose"
    LINGJUN = "Lingjun", "Lingjun"


class PreemptionPolicy(models.TextChoices):
    NEVER = "Never", "Never"
    LOWER_PRIORITY = "LowerPriority", "Lower priority first"


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    QUOTA_OWNER = "quota_owner", "Quota owner"
    ADMIN = "admin", "Admin"


class Tenant(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Workspace(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="workspaces")
    name = models.CharField(max_length=100)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="workspaces"
    )
    quotas = models.ManyToManyField("Quota", related_name="workspaces", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="workspace_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.name}/{self.name}"


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.RESEARCHER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} ({self.role})"


class Quota(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quotas")
    name = models.CharField(max_length=100, unique=True)
    resource_type = models.CharField(max_length=20, choices=ResourceType.choices)
    gpu_type = models.CharField(max_length=40)
    gpus = models.PositiveIntegerField(help_text="Guaranteed GPUs")
    cpus = models.PositiveIntegerField(default=0, help_text="Guaranteed CPUs (0 = unlimited)")
    memory_gb = models.PositiveIntegerField(
        default=0, help_text="Guaranteed memory in GB (0 = unlimited)"
    )
    preemption = models.CharField(
        "Priority preemption inside the quota",
        max_length=20,
        choices=PreemptionPolicy.choices,
        default=PreemptionPolicy.NEVER,
        help_text=(
            "Whether a higher-priority job of this quota may preempt a lower-priority one of "
            "the same quota. It does not protect borrowers: jobs running on this quota's idle "
            "GPUs (Not in Quota) are always reclaimed when the quota needs them back, after "
            "their minimum runtime (docs/scheduling.md)."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=0), name="quota_gpus_non_negative"),
            models.CheckConstraint(condition=Q(cpus__gte=0), name="quota_cpus_non_negative"),
            models.CheckConstraint(condition=Q(memory_gb__gte=0), name="quota_memory_non_negative"),
        ]

    def __str__(self) -> str:
        return self.name
