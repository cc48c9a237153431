"""Every write of tenants, workspaces, memberships and quotas (docs/domain.md).

Each action validates, writes in one short transaction and announces a `QuotaChange`
(`quotas.hooks`): the shell has the audit log record it and asks for a scheduling cycle
once the transaction commits. The admin, commands and tests all come through here.

Validation is pluggable: `QUOTA_RULES` holds checks of a quota as it would be saved
(`rule(quota, before)`, `before` None for a new one) that return field errors; the tree's
rules (docs/quota-tree.md) are added there. A refused change raises `QuotaChangeRefused`
with every field error, and nothing is written.
"""

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from policy.oidc import PROVIDER, SyncPlan, plan_sync
from quotas.hooks import QuotaChange, announce
from quotas.models import (
    Membership,
    MembershipSource,
    Quota,
    QuotaDecayedUsage,
    Tenant,
    Workspace,
)

FieldErrors = dict[str, list[str]]
QuotaRule = Callable[[Quota, Quota | None], Mapping[str, list[str]]]
# Checks every created or changed quota must pass; append to extend (docs/quota-tree.md).
QUOTA_RULES: list[QuotaRule] = []
NON_FIELD = "__all__"


class QuotaChangeRefused(Exception):
    """A change that breaks a rule: `errors` maps each field ("__all__" for the whole
    object) to its messages, ready for a form's `add_error`."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        self.errors: FieldErrors = {name: list(messages) for name, messages in errors.items()}
        super().__init__(
            "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in self.errors.items())
        )


# -- helpers -------------------------------------------------------------------------------


def _values(obj: models.Model) -> dict[str, Any]:
    """The object's own columns (a foreign key as its id), as the audit log records them."""
    return {
        field.name: field.value_from_object(obj)
        for field in obj._meta.concrete_fields
        if not field.primary_key and field.name != "created_at"
    }


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {
        name: (before.get(name), value)
        for name, value in after.items()
        if before.get(name) != value
    }


def _model_errors(obj: models.Model, exclude: Iterable[str] = ()) -> FieldErrors:
    try:
        obj.full_clean(exclude=list(exclude))
    except ValidationError as error:
        return {name: [str(m) for m in messages] for name, messages in error.message_dict.items()}
    return {}


def _refuse_if(errors: FieldErrors) -> None:
    if errors:
        raise QuotaChangeRefused(errors)


def _announce(
    action: str, obj: models.Model, actor: Any, changes: Mapping, about: Mapping | None = None
) -> None:
    object_type = action.split(".")[0]
    announce(
        QuotaChange(
            action=action,
            object_type=object_type,
            object_id=obj.pk,
            object_repr=str(obj)[:200],
            at=timezone.now(),
            actor=actor,
            changes=dict(changes),
            about=dict(about or {}),
        )
    )


def _apply(obj: models.Model, changes: Mapping[str, Any]) -> None:
    for name, value in changes.items():
        if name not in {f.name for f in obj._meta.concrete_fields}:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
        setattr(obj, name, value)


# -- quotas --------------------------------------------------------------------------------


def rule_refusals(quota: Quota, before: Quota | None = None) -> FieldErrors:
    """Field errors of `QUOTA_RULES` for `quota` as it would be saved; empty when it may
    be. A form calls this after its own model validation to show the errors."""
    errors: FieldErrors = {}
    for rule in QUOTA_RULES:
        for name, messages in rule(quota, before).items():
            errors.setdefault(name, []).extend(messages)
    return errors


def quota_refusals(quota: Quota, before: Quota | None = None) -> FieldErrors:
    """The model's own checks, then `QUOTA_RULES`."""
    errors = _model_errors(quota)
    for name, messages in rule_refusals(quota, before).items():
        errors.setdefault(name, []).extend(messages)
    return errors


def create_quota(*, actor: Any = None, **fields: Any) -> Quota:
    quota = Quota(**fields)
    _refuse_if(quota_refusals(quota))
    with transaction.atomic():
        quota.save(force_insert=True)
        _announce("quota.add", quota, actor, _diff({}, _values(quota)))
    return quota


def update_quota(quota: Quota, *, actor: Any = None, **changes: Any) -> Quota:
    """Apply `changes` to `quota` (the object may already hold them, as the admin's does):
    the stored row is locked, compared and updated with only the fields that differ."""
    with transaction.atomic():
        before = Quota.objects.select_for_update().get(pk=quota.pk)
        _apply(quota, changes)
        _refuse_if(quota_refusals(quota, before))
        changed = _diff(_values(before), _values(quota))
        if changed:
            quota.save(update_fields=[name for name in changed])
            _announce("quota.change", quota, actor, changed)
    return quota


def delete_quota(quota: Quota, *, actor: Any = None) -> None:
    """Jobs keep their quota (PROTECT): a quota with jobs cannot be deleted."""
    with transaction.atomic():
        values, pk = _values(quota), quota.pk
        quota.delete()
        quota.pk = pk
        _announce("quota.delete", quota, actor, _diff(values, dict.fromkeys(values)))


# -- tenants -------------------------------------------------------------------------------


def create_tenant(name: str, *, actor: Any = None) -> Tenant:
    tenant = Tenant(name=name)
    _refuse_if(_model_errors(tenant))
    with transaction.atomic():
        tenant.save(force_insert=True)
        _announce("tenant.add", tenant, actor, {"name": (None, name)})
    return tenant


def update_tenant(tenant: Tenant, *, actor: Any = None, **changes: Any) -> Tenant:
    with transaction.atomic():
        before = Tenant.objects.select_for_update().get(pk=tenant.pk)
        _apply(tenant, changes)
        _refuse_if(_model_errors(tenant))
        changed = _diff(_values(before), _values(tenant))
        if changed:
            tenant.save(update_fields=list(changed))
            _announce("tenant.change", tenant, actor, changed)
    return tenant


def delete_tenant(tenant: Tenant, *, actor: Any = None) -> None:
    """Its workspaces and quotas keep it (PROTECT): delete those first."""
    with transaction.atomic():
        pk = tenant.pk
        tenant.delete()
        tenant.pk = pk
        _announce("tenant.delete", tenant, actor, {"name": (tenant.name, None)})


# -- workspaces ----------------------------------------------------------------------------


def create_workspace(
    tenant: Tenant, name: str, *, quotas: Iterable[Quota] = (), actor: Any = None
) -> Workspace:
    workspace = Workspace(tenant=tenant, name=name)
    _refuse_if(_model_errors(workspace))
    with transaction.atomic():
        workspace.save(force_insert=True)
        _announce("workspace.add", workspace, actor, _diff({}, _values(workspace)))
        bind_quotas(workspace, quotas, actor=actor)
    return workspace


def update_workspace(workspace: Workspace, *, actor: Any = None, **changes: Any) -> Workspace:
    with transaction.atomic():
        before = Workspace.objects.select_for_update().get(pk=workspace.pk)
        _apply(workspace, changes)
        _refuse_if(_model_errors(workspace))
        changed = _diff(_values(before), _values(workspace))
        if changed:
            workspace.save(update_fields=list(changed))
            _announce("workspace.change", workspace, actor, changed)
    return workspace


def bind_quotas(workspace: Workspace, quotas: Iterable[Quota], *, actor: Any = None) -> None:
    """Make `quotas` exactly the quotas the workspace submits against (docs/domain.md)."""
    wanted = list(quotas)
    foreign = [q.name for q in wanted if q.tenant_id != workspace.tenant_id]
    if foreign:
        raise QuotaChangeRefused({"quotas": [f"not of this tenant: {', '.join(foreign)}"]})
    with transaction.atomic():
        had = set(workspace.quotas.values_list("pk", flat=True))
        want = {q.pk for q in wanted}
        if had == want:
            return
        workspace.quotas.set(wanted)
        _announce(
            "workspace.bind_quotas", workspace, actor, {"quotas": (sorted(had), sorted(want))}
        )


def delete_workspace(workspace: Workspace, *, actor: Any = None) -> None:
    """Jobs keep their workspace (PROTECT); memberships go with it."""
    with transaction.atomic():
        pk = workspace.pk
        workspace.delete()
        workspace.pk = pk
        # Its tenant named, as a deleted quota's: the owners' audit page keeps showing it.
        gone = {"name": (workspace.name, None), "tenant": (workspace.tenant_id, None)}
        _announce("workspace.delete", workspace, actor, gone)


# -- members -------------------------------------------------------------------------------


def _announce_member(action: str, membership: Membership, actor: Any, changes: Mapping) -> None:
    """Member changes are the workspace's (the audit log files them under it); those of
    the identity provider's memberships say so (docs/sign-in.md). The member joins
    (user: None → name) or leaves (name → None); a role change is *about* the member, whose
    name does not change."""
    workspace = membership.workspace
    name = membership.user.get_username()
    about: dict[str, Any] = {}
    before, after = changes.get("role", (None, None))
    if before is not None and after is not None:
        about["user"] = name
    else:
        changes = {"user": (None if before is None else name, after and name), **changes}
    if membership.source == MembershipSource.PROVIDER:
        # Added: (None, oidc); removed: (oidc, None); a new role: (oidc, oidc).
        changes = {**changes, "source": (before and PROVIDER, after and PROVIDER)}
    _announce(f"workspace.{action}", workspace, actor, changes, about)


def add_member(
    workspace: Workspace,
    user: Any,
    role: str,
    *,
    actor: Any = None,
    source: str = MembershipSource.MANUAL,
) -> Membership:
    membership = Membership(workspace=workspace, user=user, role=role, source=source)
    _refuse_if(_model_errors(membership))
    with transaction.atomic():
        membership.save(force_insert=True)
        _announce_member("member_add", membership, actor, {"role": (None, role)})
    return membership


def change_role(membership: Membership, role: str, *, actor: Any = None) -> Membership:
    with transaction.atomic():
        before = Membership.objects.select_for_update().get(pk=membership.pk)
        membership.role = role
        _refuse_if(_model_errors(membership, exclude=["workspace", "user"]))
        if before.role != role:
            membership.save(update_fields=["role"])
            _announce_member("member_role", membership, actor, {"role": (before.role, role)})
    return membership


def remove_member(membership: Membership, *, actor: Any = None) -> None:
    with transaction.atomic():
        role = membership.role
        membership.delete()
        _announce_member("member_remove", membership, actor, {"role": (role, None)})


def sync_provider_memberships(
    user: Any, wanted: Mapping[int, str], *, actor: Any = None
) -> SyncPlan:
    """Make the identity provider's memberships of `user` exactly `wanted` (workspace id →
    role, from the groups of a sign-in; docs/sign-in.md): each added, changed or removed
    through the actions above, audited like any member change. Memberships a person added
    are left as they are, and the last-owner rule of the owner pages does not hold here:
    the provider decides who owns what it maps."""
    with transaction.atomic():
        mine = Membership.objects.select_for_update().filter(user=user)
        current = {m.workspace_id: m for m in mine.select_related("workspace__tenant", "user")}
        plan = plan_sync(wanted, {pk: (m.role, m.source) for pk, m in current.items()})
        workspaces = Workspace.objects.select_related("tenant").in_bulk(list(plan.add))
        for pk, role in plan.add.items():
            if pk in workspaces:  # deleted meanwhile: nothing to join
                add_member(workspaces[pk], user, role, actor=actor, source=PROVIDER)
        for pk, role in plan.change.items():
            change_role(current[pk], role, actor=actor)
        for pk in plan.remove:
            remove_member(current[pk], actor=actor)
    return plan


def replace_decayed_usage(rows: Iterable[tuple[int, float]], at: datetime) -> int:
    """Replace every quota's decayed borrowed GPU-seconds (historical fair share,
    docs/quota-tree.md) with `rows` of (quota id, GPU-seconds) as of `at`: one delete, one
    insert. Written by usage history's roll-up (usage.actions.decay). Returns the rows."""
    found = [QuotaDecayedUsage(quota_id=q, at=at, gpu_seconds=s) for q, s in rows]
    QuotaDecayedUsage.objects.all().delete()
    QuotaDecayedUsage.objects.bulk_create(found)
    return len(found)
