"""Tenants, workspaces with members, and the quotas bound to them (docs/domain.md); the
quota tree's rules (`policy.tree_rules`) checked against the database before a quota is
saved (`validate_quota_change`: one read, no writes; docs/quota-tree.md).
"""

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from policy.tree_rules import QuotaFacts, problems


class ResourceType(models.TextChoices):
    GENERAL_PURPOSE = "General-purpose", "General-purpose"
    LINGJUN = "Lingjun", "Lingjun"


class PreemptionPolicy(models.TextChoices):
    NEVER = "Never", "Never"
    LOWER_PRIORITY = "LowerPriority", "Lower priority first"
    LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority", "Lower, or equal priority started later"


class ReclaimWithinTree(models.TextChoices):
    """Whom a guaranteed job of the quota may reclaim lent GPUs from (docs/scheduling.md)."""

    ANY = "Any", "Any borrower"
    LOWER_PRIORITY = "LowerPriority", "Borrowers of lower priority"
    NEVER = "Never", "Never (wait for borrowers to end)"


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    QUOTA_OWNER = "quota_owner", "Quota owner"
    ADMIN = "admin", "Admin"


class MembershipSource(models.TextChoices):
    """Who made a membership: a person (the owner pages, the admin, a command), or the
    organisation's identity provider at a sign-in (docs/sign-in.md), which changes and
    removes only its own."""

    MANUAL = "manual", "Added by a person"
    PROVIDER = "oidc", "Identity provider"


class Tenant(models.Model):
    name = models.CharField(max_length=100, unique=True)
    # Borrowers may preempt other borrowers to restore weighted shares of idle capacity
    # (docs/quota-tree.md); off by default.
    fair_share_preemption = models.BooleanField(
        default=False,
        help_text="Borrowers may preempt other borrowers to restore weighted shares of idle GPUs",
    )
    # Borrowers ordered by their borrowed GPU-seconds decayed over a half-life, not only by
    # what they borrow now (docs/quota-tree.md, "Historical fair share"); off by default.
    historical_fair_share = models.BooleanField(
        default=False,
        help_text="Idle GPUs go first to the quotas that borrowed least recently (decayed)",
    )
    fair_share_half_life_hours = models.PositiveIntegerField(
        default=168,
        validators=[MinValueValidator(1)],
        help_text="Half-life of borrowed GPU-seconds for historical fair share (hours)",
    )
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
    source = models.CharField(
        max_length=20,
        choices=MembershipSource.choices,
        default=MembershipSource.MANUAL,
        editable=False,
    )

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
        max_length=30,
        choices=PreemptionPolicy.choices,
        default=PreemptionPolicy.NEVER,
        help_text=(
            "Whether a higher-priority job of this quota may preempt a lower-priority one of "
            "the same quota. It does not protect borrowers: jobs running on this quota's idle "
            "GPUs (Not in Quota) are always reclaimed when the quota needs them back, after "
            "their minimum runtime (docs/scheduling.md)."
        ),
    )
    # The quota tree (docs/quota-tree.md): a parent of the same tenant, resource type and
    # GPU type; `gpus` is the whole subtree's guarantee, carved up by the children.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    max_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Limit: GPUs the jobs of this subtree may hold at once, in quota and "
        "borrowed (empty = no limit)",
    )
    lending_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Most of this subtree's unused guarantee lent outside it (empty = all, 0 = none)",
    )
    weight = models.FloatField(default=1.0, help_text="Share of idle GPUs when quotas compete")
    # The sharing options (docs/scheduling.md, the decision table); defaults: today's rules.
    reclaim_within_tree = models.CharField(
        "Reclaim lent GPUs from",
        max_length=20,
        choices=ReclaimWithinTree.choices,
        default=ReclaimWithinTree.ANY,
        # Not required in a form: left out, it keeps its value (empty reads as Any).
        blank=True,
        help_text="Which borrowers a job of this quota may preempt to get its guarantee back "
        "(its own quota's idle jobs always; empty: any)",
    )
    borrow_within_tree_max_priority = models.IntegerField(
        "Borrowers may preempt lower priorities up to",
        null=True,
        blank=True,
        help_text="An idle job of this quota that finds no idle GPUs may preempt borrowers of "
        "other quotas with a lower priority, at most this one (empty = never; ignored where "
        "the tenant has fair-share preemption)",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=0), name="quota_gpus_non_negative"),
            models.CheckConstraint(condition=Q(cpus__gte=0), name="quota_cpus_non_negative"),
            models.CheckConstraint(condition=Q(memory_gb__gte=0), name="quota_memory_non_negative"),
            models.CheckConstraint(condition=Q(weight__gt=0), name="quota_weight_positive"),
            models.CheckConstraint(
                condition=Q(max_gpus__isnull=True) | Q(max_gpus__gte=models.F("gpus")),
                name="quota_limit_not_below_guarantee",
            ),
            models.CheckConstraint(
                condition=Q(parent__isnull=True) | ~Q(parent=models.F("id")),
                name="quota_not_its_own_parent",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # The tree's rules as field errors (docs/quota-tree.md "Rules for quota owners").
        validate_quota_change(self)


class QuotaDecayedUsage(models.Model):
    """A quota's borrowed GPU-seconds decayed over its tenant's half-life as of `at`
    (historical fair share, docs/quota-tree.md): written by usage history's roll-up
    (usage.actions.decay, through quotas.actions) for tenants that turned it on, read by the
    scheduler's snapshot (which decays it on to the cycle's now). A scheduling input of the
    quota, so it lives with the quota."""

    quota_id = models.IntegerField(unique=True)
    at = models.DateTimeField()
    gpu_seconds = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"quota {self.quota_id}: {self.gpu_seconds:.0f} decayed GPU-seconds"


# -- the quota tree's rules over the database -------------------------------------------------
# `validate_quota_change` is what `Quota.clean` (the admin's form) and `quotas.actions` call
# before saving, so every way of changing a quota refuses the same things with the same field
# errors (docs/quota-tree.md "Rules for quota owners").

_TREE_FIELDS = (
    "id",
    "name",
    "tenant_id",
    "resource_type",
    "gpu_type",
    "gpus",
    "parent_id",
    "max_gpus",
    "lending_limit",
    "weight",
)


def facts_of(quota: Quota, changes: Mapping[str, Any] | None = None) -> QuotaFacts:
    """The quota as it would be with `changes` (field name → value; `parent` may be given
    as a Quota or as `parent_id`) applied."""
    values = {f: getattr(quota, f) for f in _TREE_FIELDS}
    for key, value in (changes or {}).items():
        if key in ("parent", "tenant"):
            key, value = f"{key}_id", getattr(value, "pk", value)
        values[key] = value
    return QuotaFacts(
        id=values["id"],
        name=values["name"] or "",
        tenant_id=values["tenant_id"],
        resource_type=values["resource_type"] or "",
        gpu_type=values["gpu_type"] or "",
        gpus=values["gpus"] if values["gpus"] is not None else 0,
        parent_id=values["parent_id"],
        max_gpus=values["max_gpus"],
        lending_limit=values["lending_limit"],
        weight=values["weight"] if values["weight"] is not None else 1.0,
    )


def validate_quota_change(quota: Quota, changes: Mapping[str, Any] | None = None) -> None:
    """Raise ValidationError (field → messages) when the change breaks the tree's rules.
    Reads the tenant's quotas, the proposed parent and the quota's children in one query."""
    proposed = facts_of(quota, changes)
    if proposed.tenant_id is None:
        return  # the form reports the missing tenant itself
    related = Q(tenant_id=proposed.tenant_id)
    if proposed.parent_id is not None:
        related |= Q(pk=proposed.parent_id)
    if proposed.id is not None:
        related |= Q(parent_id=proposed.id)
    existing = [QuotaFacts(**row) for row in Quota.objects.filter(related).values(*_TREE_FIELDS)]
    found = problems(proposed, existing)
    if found:
        raise ValidationError(found)
