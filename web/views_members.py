"""Workspaces and their members on the owner pages, under /quotas/ (docs/quota-tree.md
"Owner pages").

Owners and staff create workspaces, bind quotas, add members (by username or e-mail) with a
role, change roles and remove members (after a confirmation page); a member of the
workspace sees it read-only (403 on a change); anyone else gets a 404. Every write goes
through `quotas.actions` (audited, followed by a scheduling cycle). A tenant keeps at least
one quota owner or admin (`quotas.access.last_owner_refusal`).
"""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from quotas import actions
from quotas.access import (
    MAX_ID,
    get_tenant_for_user,
    get_workspace_for_user,
    last_owner_refusal,
)
from quotas.models import Membership, Role, Workspace
from web.quota_forms import BindForm, MemberForm, RoleForm, WorkspaceForm
from web.views_quotas import done, panel

CHANGE_REFUSED = "Only the tenant's quota owners change its workspaces and members."


_workspace_for_user = get_workspace_for_user


def _membership_for_owner(user, pk: int) -> Membership:
    membership = (
        Membership.objects.select_related("workspace__tenant", "user").filter(pk=pk).first()
        if pk <= MAX_ID
        else None
    )
    if membership is None:
        raise Http404("No such member")
    _, can_write = _workspace_for_user(user, membership.workspace_id)
    if not can_write:
        raise PermissionDenied(CHANGE_REFUSED)
    return membership


def workspace_url(workspace: Workspace) -> str:
    return reverse("owner-workspace", args=[workspace.pk])


def _detail(
    request: HttpRequest,
    workspace: Workspace,
    can_write: bool,
    *,
    member_form: MemberForm | None = None,
    bind_form: BindForm | None = None,
    role_errors: dict[int, str] | None = None,
) -> HttpResponse:
    tenant = workspace.tenant
    members = workspace.memberships.select_related("user").order_by("user__username")
    bound = list(workspace.quotas.order_by("name"))
    context = {
        "tenant": tenant,
        "workspace": workspace,
        "can_write": can_write,
        "members": members,
        "bound": bound,
        "roles": Role.choices,
        "role_errors": role_errors or {},
        "member_form": member_form or MemberForm(workspace=workspace),
        "bind_form": bind_form
        or BindForm(tenant=tenant, initial={"quotas": [q.pk for q in bound]}),
    }
    return panel(request, "web/owners/workspace.html", context)


@login_required
@require_GET
def workspace_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workspace, can_write = _workspace_for_user(request.user, pk)
    return _detail(request, workspace, can_write)


@login_required
@require_http_methods(["GET", "POST"])
def workspace_new(request: HttpRequest, tenant_id: int) -> HttpResponse:
    tenant, can_write = get_tenant_for_user(request.user, tenant_id)
    if not can_write:
        raise PermissionDenied(CHANGE_REFUSED)
    form = WorkspaceForm(request.POST if request.method == "POST" else None, tenant=tenant)
    if request.method == "POST" and form.is_valid():
        try:
            workspace = actions.create_workspace(
                tenant,
                form.cleaned_data["name"],
                quotas=form.cleaned_data["quotas"],
                actor=request.user,
            )
        except actions.QuotaChangeRefused as refused:
            _add_errors(form, refused)
        else:
            return done(request, workspace_url(workspace), f"Workspace {workspace.name} created.")
    return panel(request, "web/owners/workspace_form.html", {"tenant": tenant, "form": form})


def _add_errors(form, refused: actions.QuotaChangeRefused) -> None:
    for name, problems in refused.errors.items():
        for problem in problems:
            form.add_error(name if name in form.fields else None, problem)


@login_required
@require_POST
def workspace_bind(request: HttpRequest, pk: int) -> HttpResponse:
    workspace, can_write = _workspace_for_user(request.user, pk)
    if not can_write:
        raise PermissionDenied(CHANGE_REFUSED)
    form = BindForm(request.POST, tenant=workspace.tenant)
    if form.is_valid():
        try:
            actions.bind_quotas(workspace, form.cleaned_data["quotas"], actor=request.user)
        except actions.QuotaChangeRefused as refused:
            _add_errors(form, refused)
        else:
            return done(request, workspace_url(workspace), "Bound quotas saved.")
    return _detail(request, workspace, can_write, bind_form=form)


@login_required
@require_POST
def member_add(request: HttpRequest, pk: int) -> HttpResponse:
    workspace, can_write = _workspace_for_user(request.user, pk)
    if not can_write:
        raise PermissionDenied(CHANGE_REFUSED)
    form = MemberForm(request.POST, workspace=workspace)
    if form.is_valid():
        user, role = form.cleaned_data["user"], form.cleaned_data["role"]
        try:
            actions.add_member(workspace, user, role, actor=request.user)
        except actions.QuotaChangeRefused as refused:
            _add_errors(form, refused)
        else:
            text = f"{user.get_username()} added to {workspace.name} as {Role(role).label}."
            return done(request, workspace_url(workspace), text)
    return _detail(request, workspace, can_write, member_form=form)


@login_required
@require_POST
def member_role(request: HttpRequest, pk: int) -> HttpResponse:
    membership = _membership_for_owner(request.user, pk)
    workspace = membership.workspace
    form = RoleForm(request.POST)
    if form.is_valid():
        role = form.cleaned_data["role"]
        refusal = last_owner_refusal(membership, role)
        if refusal is None:
            actions.change_role(membership, role, actor=request.user)
            name = membership.user.get_username()
            return done(request, workspace_url(workspace), f"{name} is now {Role(role).label}.")
    else:
        refusal = " ".join(form.errors.get("role", ["Choose a role."]))
    return _detail(request, workspace, True, role_errors={membership.pk: refusal})


@login_required
@require_http_methods(["GET", "POST"])
def member_remove(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the confirmation page; POST: remove (unless it is the tenant's last owner)."""
    membership = _membership_for_owner(request.user, pk)
    workspace = membership.workspace
    refusal = last_owner_refusal(membership, None)
    if request.method == "POST" and refusal is None:
        name, itself = membership.user.get_username(), membership.user_id == request.user.pk
        actions.remove_member(membership, actor=request.user)
        # Who removed themselves may no longer see the workspace.
        url = reverse("quotas") if itself else workspace_url(workspace)
        return done(request, url, f"{name} removed from {workspace.name}.")
    context = {"tenant": workspace.tenant, "workspace": workspace, "membership": membership}
    context["refusal"] = refusal
    return panel(request, "web/owners/member_remove.html", context)
