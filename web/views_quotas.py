"""The owner pages of a tenant's quota tree, mounted under /quotas/ (docs/quota-tree.md
"Owner pages").

Function views, thin over `web.quota_forms` and the one path of a quota change
(`jobs.actions.quota_changes`: checks, preview, save through `quotas.actions`).
Owners (role quota owner or admin in a workspace of the tenant) and staff change; the
tenant's other members see the tree read-only (403 on a change); anyone else gets a 404.
A change is previewed first: a valid POST shows what `plan()` would do with it, and only a
POST with `confirm` and the preview's state token saves it (through `quotas.actions`:
audited, followed by a scheduling cycle). A token of a state that moved shows the preview
again. With HTMX the form and the preview swap in place (`#quota-panel`); without it every
step is a plain page.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, ProtectedError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from jobs.actions.quota_changes import change_quota, what_if
from jobs.forecast import current_snapshot
from jobs.models import Job, Pod
from policy.accounting import account, tree_order
from policy.quota_preview import QuotaEdit, pool_of, state_token
from quotas import actions
from quotas.access import MAX_ID, get_tenant_for_user
from quotas.models import Quota, Tenant, Workspace
from web.quota_forms import SHARING_DEFAULTS, SHARING_FIELDS, QuotaForm


def tree_url(tenant: Tenant) -> str:
    return reverse("owner-tree", args=[tenant.pk])


def done(request: HttpRequest, url: str, text: str) -> HttpResponse:
    """After a saved change: a message and the tree (a client redirect under HTMX)."""
    messages.success(request, text)
    return HttpResponseClientRedirect(url) if request.htmx else HttpResponseRedirect(url)


def panel(request: HttpRequest, template: str, context: dict) -> HttpResponse:
    """The whole page, or only its `panel` partial for HTMX."""
    return render(request, f"{template}#panel" if request.htmx else template, context)


def _quota_for_user(user, pk: int) -> tuple[Quota, Tenant, bool]:
    from django.http import Http404

    quota = Quota.objects.select_related("tenant").filter(pk=pk).first() if pk <= MAX_ID else None
    if quota is None:
        raise Http404("No such quota")
    tenant, can_write = get_tenant_for_user(user, quota.tenant_id)
    return quota, tenant, can_write


@login_required
@require_GET
def owner_tree(request: HttpRequest, tenant_id: int) -> HttpResponse:
    """The tenant's tree with each quota's settings and live use, and its workspaces."""
    tenant, can_write = get_tenant_for_user(request.user, tenant_id)
    acc = account(current_snapshot())
    rows = tree_order(u for u in acc.quotas.values() if u.tenant_id == tenant.pk)
    workspaces = (
        Workspace.objects.filter(tenant=tenant)
        .annotate(members_n=Count("memberships", distinct=True))
        .annotate(quotas_n=Count("quotas", distinct=True))
        .order_by("name")
    )
    context = {"tenant": tenant, "can_write": can_write, "quotas": rows, "workspaces": workspaces}
    return render(request, "web/owners/tree.html", context)


def _quota_flow(
    request: HttpRequest, tenant: Tenant, quota: Quota | None, parent: Quota | None
) -> HttpResponse:
    """GET: the form. POST: errors, or the preview; POST with `confirm`: save."""
    initial = {}
    if quota is not None:
        initial = {f: getattr(quota, f) for f in ("name", "gpus", "max_gpus", "lending_limit")}
        initial |= {"parent": quota.parent_id, "weight": quota.weight}
        initial |= {f: getattr(quota, f) for f in SHARING_FIELDS}
    elif parent is not None:
        initial = {"parent": parent.pk, "weight": 1.0, **SHARING_DEFAULTS}
    data = request.POST if request.method == "POST" else None
    form = QuotaForm(data, tenant=tenant, quota=quota, parent=parent, initial=initial)
    if quota is None:
        form.fields["parent"].required = True
    context = {"tenant": tenant, "quota": quota, "parent": parent, "form": form}
    if data is None or "back" in data or not form.is_valid():
        return panel(request, "web/owners/quota_form.html", context)
    # The one path (the admin's and the API's too): checked, previewed, or saved when the
    # confirm names the state the preview was computed on.
    outcome = change_quota(
        tenant=tenant,
        quota=quota,
        values=form.values(),
        actor=request.user,
        save="confirm" in data,
        token=data.get("token", ""),
        parent=parent,
    )
    if outcome.errors:
        form.add_refusals(outcome.errors)
        return panel(request, "web/owners/quota_form.html", context)
    if outcome.saved is not None:
        verb = "created" if quota is None else "saved"
        return done(request, tree_url(tenant), f"Quota {outcome.saved.name} {verb}.")
    context |= {"preview": outcome.preview, "stale": outcome.stale}
    return panel(request, "web/owners/quota_preview.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def quota_new(request: HttpRequest, tenant_id: int) -> HttpResponse:
    """A child quota (its parent from `?parent=` or the form), previewed, then saved."""
    tenant, can_write = get_tenant_for_user(request.user, tenant_id)
    if not can_write:
        raise PermissionDenied("Only the tenant's quota owners change its quotas.")
    parent_id = request.GET.get("parent") or request.POST.get("parent") or ""
    parent = None
    if parent_id.isascii() and parent_id.isdigit() and int(parent_id) <= MAX_ID:
        parent = Quota.objects.filter(tenant=tenant, pk=int(parent_id)).first()
    return _quota_flow(request, tenant, None, parent)


@login_required
@require_http_methods(["GET", "POST"])
def quota_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Resize, re-parent, limit, lending limit, weight: previewed, then saved."""
    quota, tenant, can_write = _quota_for_user(request.user, pk)
    if not can_write:
        raise PermissionDenied("Only the tenant's quota owners change its quotas.")
    return _quota_flow(request, tenant, quota, None)


def why_not_empty(quota: Quota) -> str:
    """Why the quota cannot be deleted, or "" (three bounded queries)."""
    children = list(quota.children.values_list("name", flat=True)[:3])
    if children:
        return f"It has child quotas ({', '.join(children)}): delete or move them first."
    if Job.objects.filter(quota=quota).exists() or Pod.objects.filter(charged_quota=quota).exists():
        return "Jobs were submitted to it or charged to it; their history keeps it."
    return ""


@login_required
@require_http_methods(["GET", "POST"])
def quota_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Delete an empty quota: GET previews (its guarantee goes back to its parent), POST
    with `confirm` and the token deletes."""
    quota, tenant, can_write = _quota_for_user(request.user, pk)
    if not can_write:
        raise PermissionDenied("Only the tenant's quota owners change its quotas.")
    blocked = why_not_empty(quota)
    context = {"tenant": tenant, "quota": quota, "blocked": blocked, "preview": None}
    if blocked:
        return panel(request, "web/owners/quota_delete.html", context)
    snapshot, edit = current_snapshot(), QuotaEdit(quota.pk, {}, delete=True)
    posted = request.POST.get("token") if request.method == "POST" else None
    if posted and posted == state_token(snapshot, pool_of(snapshot, edit)):
        name = quota.name
        try:
            actions.delete_quota(quota, actor=request.user)
        except ProtectedError:
            context["blocked"] = "Something still refers to it; it was not deleted."
            return panel(request, "web/owners/quota_delete.html", context)
        return done(request, tree_url(tenant), f"Quota {name} deleted.")
    context["preview"] = what_if(snapshot, edit)
    context["stale"] = request.method == "POST"
    return panel(request, "web/owners/quota_delete.html", context)
