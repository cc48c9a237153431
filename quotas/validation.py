"""The quota tree's rules (`policy.tree_rules`) over the database: one read, no writes.

`validate_quota_change` is what `Quota.clean` (the admin's form) and `quotas.actions` call
before saving, so every way of changing a quota refuses the same things with the same field
errors (docs/quota-tree.md "Rules for quota owners").
"""

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q

from policy.tree_rules import QuotaFacts, problems
from quotas.models import Quota

_FIELDS = (
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
    values = {f: getattr(quota, f) for f in _FIELDS}
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
    existing = [QuotaFacts(**row) for row in Quota.objects.filter(related).values(*_FIELDS)]
    found = problems(proposed, existing)
    if found:
        raise ValidationError(found)
