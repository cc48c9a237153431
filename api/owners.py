"""The owners' API (docs/quota-tree.md "Owners' API"): a tenant's tree; creating, resizing and
re-parenting quotas with a dry run (`preview=true`: what the owner pages' preview shows);
workspaces' members and roles.

The same checks and actions as the owner pages: `quotas.access` says who sees (members of
the tenant: read) and who changes (its quota owners and admins, staff); anyone else gets a
404. Quota changes go through the one path (`jobs.actions.quota_changes.change_quota`),
members through `quotas.actions` with the last-owner rule (`quotas.access`).
"""

from dataclasses import asdict

from django.http import Http404, HttpRequest
from ninja import Query, Router, Status
from pydantic import BaseModel, Field

from accounts.api_auth import ApiError
from api import owner_schemas as schemas
from api.cluster import router as quotas_router
from api.jobs import READ_ERRORS, WRITE_ERRORS, E
from api.parsing import bad_text, reject_unknown_query
from jobs.actions.quota_changes import QuotaChangeOutcome, change_quota, describe
from quotas import actions
from quotas.access import (
    MAX_ID,
    find_account,
    get_tenant_for_user,
    get_workspace_for_user,
    last_owner_refusal,
)
from quotas.models import Membership, Quota, Tenant, Workspace

router = Router(tags=["quota owners"])
TAGS = ["quota owners"]
CHANGE_ERRORS = {403: E, **WRITE_ERRORS}
REFUSED = "Only the tenant's quota owners change its quotas, workspaces and members."


class PreviewQuery(BaseModel):
    preview: bool = Field(False, description="A dry run: what the change would do, unsaved.")


def _id_or_none(ref: str) -> int | None:
    return int(ref) if ref.isascii() and ref.isdigit() and len(ref) < 19 else None


def _checked_ref(ref: str, what: str) -> str:
    if bad_text(ref) or len(ref) > 200:
        raise ApiError(404, "not_found", f"No {what} by that name.")
    return ref


def _tenant(user, ref: str) -> tuple[Tenant, bool]:
    ref = _checked_ref(ref, "tenant")
    pk = _id_or_none(ref)
    found = Tenant.objects.filter(pk=pk).first() if pk and pk <= MAX_ID else None
    found = found or Tenant.objects.filter(name=ref).first()
    try:
        return get_tenant_for_user(user, found.pk if found else 0)
    except Http404:
        raise ApiError(404, "not_found", f"No tenant {ref[:100]!r}.") from None


def _quota(user, ref: str | int, field: str | None = None) -> tuple[Quota, bool]:
    """A quota by name or id, and whether the user may change it (404 when they may not
    see its tenant)."""
    ref = _checked_ref(str(ref), "quota")
    pk = _id_or_none(ref)
    found = Quota.objects.select_related("tenant", "parent").filter(pk=pk).first() if pk else None
    found = found or Quota.objects.select_related("tenant", "parent").filter(name=ref).first()
    try:
        if found is None:
            raise Http404
        _, can_write = get_tenant_for_user(user, found.tenant_id)
    except Http404:
        where = f"{field}: " if field else ""
        raise ApiError(404, "not_found", f"{where}no quota {ref[:100]!r}.", field) from None
    return found, can_write


def _workspace(user, ref: str) -> tuple[Workspace, bool]:
    """A workspace by id, or by name among those the user sees (a name two tenants use:
    give the id)."""
    ref = _checked_ref(ref, "workspace")
    pk = _id_or_none(ref)
    if pk is None:
        named = Workspace.objects.filter(name=ref).values_list("pk", flat=True)[:20]
        seen = []
        for candidate in named:
            try:
                seen.append(get_workspace_for_user(user, candidate))
            except Http404:
                continue
        if len(seen) > 1:
            raise ApiError(
                400, "ambiguous", f"Several workspaces are named {ref[:100]!r}: use its id."
            )
        if seen:
            return seen[0]
        pk = 0
    try:
        return get_workspace_for_user(user, pk)
    except Http404:
        raise ApiError(404, "not_found", f"No workspace {ref[:100]!r}.") from None


def _must_change(can_write: bool) -> None:
    if not can_write:
        raise ApiError(403, "permission_denied", REFUSED)


def settings_json(quota: Quota) -> dict:
    return {
        "id": quota.pk,
        "name": quota.name,
        "tenant": quota.tenant.name,
        "resource_type": quota.resource_type,
        "gpu_type": quota.gpu_type,
        "parent": quota.parent.name if quota.parent_id else None,
        "gpus": quota.gpus,
        "max_gpus": quota.max_gpus,
        "lending_limit": quota.lending_limit,
        "weight": quota.weight,
        "preemption": quota.preemption,
        "reclaim_within_tree": quota.reclaim_within_tree or "Any",
        "borrow_within_tree_max_priority": quota.borrow_within_tree_max_priority,
    }


def _refused(errors: dict[str, list[str]]) -> ApiError:
    fields = {("__all__" if name == actions.NON_FIELD else name): m for name, m in errors.items()}
    first = next(iter(fields))
    field = None if first == "__all__" else first
    return ApiError(400, "validation_error", fields[first][0], field, fields)


def _result(outcome: QuotaChangeOutcome):
    if outcome.errors:
        raise _refused(outcome.errors)
    if outcome.saved is not None:
        saved = Quota.objects.select_related("tenant", "parent").get(pk=outcome.saved.pk)
        return {
            "saved": True,
            "quota": settings_json(saved),
            "preview": None,
            "token": outcome.token,
        }
    assert outcome.preview is not None
    if outcome.stale:
        raise ApiError(
            409,
            "stale_preview",
            "The tree or the running jobs changed since that preview; preview again.",
            "token",
        )
    preview = asdict(outcome.preview)
    preview.pop("token")
    preview |= {"quiet": outcome.preview.quiet, "lines": describe(outcome.preview)}
    return {"saved": False, "quota": None, "preview": preview, "token": outcome.token}


def _values(user, payload: BaseModel, tenant: Tenant) -> dict:
    """The fields sent (`parent` resolved among the tenant's quotas)."""
    values = {name: getattr(payload, name) for name in payload.model_fields_set - {"token"}}
    if values.get("parent") is not None:
        parent, _ = _quota(user, values["parent"], "parent")
        if parent.tenant_id != tenant.pk:
            raise ApiError(404, "not_found", "parent: no such quota in this tenant.", "parent")
        values["parent"] = parent
    return values


@router.get(
    "/tenants/{ref}/quotas",
    response={200: schemas.Tree, **READ_ERRORS},
    url_name="tenant-quotas",
    summary="A tenant's quota tree and its settings (its members)",
)
def tenant_tree(request: HttpRequest, ref: str):
    tenant, can_write = _tenant(request.user, ref)
    quotas = Quota.objects.filter(tenant=tenant).select_related("tenant", "parent").order_by("name")
    return {
        "tenant": tenant.name,
        "can_change": can_write,
        "quotas": [settings_json(q) for q in quotas],
    }


@router.post(
    "/tenants/{ref}/quotas",
    response={200: schemas.QuotaChangeResult, 201: schemas.QuotaChangeResult, **CHANGE_ERRORS},
    url_name="tenant-quota-create",
    summary="Create a child quota (preview=true: a dry run)",
)
def create_quota(
    request: HttpRequest, ref: str, payload: schemas.QuotaCreate, query: Query[PreviewQuery]
):
    """Its resource and GPU type are its parent's. With `preview=true` nothing is saved and
    the answer is what the owner pages' preview shows, with the `token` of that state; send
    the token back to save only while that state holds."""
    reject_unknown_query(request, PreviewQuery)
    tenant, can_write = _tenant(request.user, ref)
    _must_change(can_write)
    outcome = change_quota(
        tenant=tenant,
        quota=None,
        values=_values(request.user, payload, tenant),
        actor=request.user,
        save=not query.preview,
        token=payload.token,
    )
    result = _result(outcome)
    return Status(201 if result["saved"] else 200, result)


@quotas_router.patch(
    "/quotas/{ref}",
    response={200: schemas.QuotaChangeResult, **CHANGE_ERRORS},
    url_name="quota-change",
    summary="Resize, re-parent, limit or weigh a quota (preview=true: a dry run)",
    tags=TAGS,
)
def change_quota_settings(
    request: HttpRequest, ref: str, payload: schemas.QuotaChange, query: Query[PreviewQuery]
):
    """Only the fields sent change (`null` clears a limit). Quota owners of its tenant and
    staff; the tenant's other members get 403."""
    reject_unknown_query(request, PreviewQuery)
    quota, can_write = _quota(request.user, ref)
    _must_change(can_write)
    outcome = change_quota(
        tenant=quota.tenant,
        quota=quota,
        values=_values(request.user, payload, quota.tenant),
        actor=request.user,
        save=not query.preview,
        token=payload.token,
    )
    return _result(outcome)


def member_json(membership: Membership) -> dict:
    return {
        "id": membership.pk,
        "user": membership.user.get_username(),
        "role": membership.role,
        "source": membership.source,
    }


@router.get(
    "/workspaces/{ref}/members",
    response={200: schemas.Members, **READ_ERRORS},
    url_name="workspace-members",
    summary="A workspace's members and roles (its members, the tenant's owners)",
)
def list_members(request: HttpRequest, ref: str):
    workspace, _ = _workspace(request.user, ref)
    members = workspace.memberships.select_related("user").order_by("user__username")
    return {
        "workspace": workspace.name,
        "tenant": workspace.tenant.name,
        "members": [member_json(m) for m in members],
    }


def _item_error(index: int, message: str, field: str) -> dict:
    detail = {"code": "validation_error", "message": message, "field": field}
    return {"index": index, "error": detail | {"fields": {field: [message]}}}


@router.post(
    "/workspaces/{ref}/members",
    response={201: schemas.MembersAdded, **CHANGE_ERRORS},
    url_name="workspace-members-add",
    summary="Add members with their roles (each refused alone)",
)
def add_members(request: HttpRequest, ref: str, payload: schemas.MembersAdd):
    """Each member is added on its own: one that cannot be (no such account, already a
    member) is reported by its index and the others are added. All refused: 400."""
    workspace, can_write = _workspace(request.user, ref)
    _must_change(can_write)
    present = set(workspace.memberships.values_list("user_id", flat=True))
    added, errors = [], []
    for index, item in enumerate(payload.members):
        user, why = find_account(item.user.strip())
        if user is not None and user.pk in present:
            why = f"{user.get_username()} is already a member of {workspace.name}."
        if user is None or why:
            errors.append(_item_error(index, why, f"members.{index}.user"))
            continue
        added.append(actions.add_member(workspace, user, item.role, actor=request.user))
        present.add(user.pk)
    if not added:
        first = errors[0]["error"]
        fields = {e["error"]["field"]: e["error"]["fields"][e["error"]["field"]] for e in errors}
        raise ApiError(400, "validation_error", first["message"], first["field"], fields)
    return Status(201, {"members": [member_json(m) for m in added], "errors": errors})


def _membership(request: HttpRequest, ref: str, username: str) -> Membership:
    workspace, can_write = _workspace(request.user, ref)
    found = (
        workspace.memberships.select_related("user", "workspace__tenant")
        .filter(user__username=_checked_ref(username, "member"))
        .first()
    )
    if found is None:
        raise ApiError(404, "not_found", f"{username[:100]!r} is not a member of {workspace.name}.")
    _must_change(can_write)
    return found


@router.patch(
    "/workspaces/{ref}/members/{username}",
    response={200: schemas.Member, **CHANGE_ERRORS},
    url_name="workspace-member",
    summary="Change a member's role",
)
def change_role(request: HttpRequest, ref: str, username: str, payload: schemas.RoleChange):
    membership = _membership(request, ref, username)
    refusal = last_owner_refusal(membership, payload.role)
    if refusal:
        raise ApiError(409, "last_owner", refusal, "role")
    return member_json(actions.change_role(membership, payload.role, actor=request.user))


@router.delete(
    "/workspaces/{ref}/members/{username}",
    response={204: None, **CHANGE_ERRORS},
    url_name="workspace-member-remove",
    summary="Remove a member",
)
def remove_member(request: HttpRequest, ref: str, username: str):
    membership = _membership(request, ref, username)
    refusal = last_owner_refusal(membership, None)
    if refusal:
        raise ApiError(409, "last_owner", refusal)
    actions.remove_member(membership, actor=request.user)
    return Status(204, None)
