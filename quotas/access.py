"""Who sees which quotas and tenants: researchers see the quotas bound to their workspaces;
quota owners (role quota owner or admin in a workspace of a tenant) see every quota of that
tenant; superusers see every tenant."""

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from django.http import Http404

from quotas.models import Membership, Quota, Role, Tenant, Workspace

OWNER_ROLES = (Role.QUOTA_OWNER, Role.ADMIN)
MAX_ID = 2**63 - 1


class HiddenObject(Http404):
    """A 404 for an object that exists but the user may not see (its existence is still
    not confirmed to them). The shells record it as denied access (`audit.denials`; the
    web's `audit.middleware`, the API's `api.main`); a plain Http404 (no such object) is not
    recorded. Raised by the access helpers: tenants here, jobs in `jobs.access`."""

    def __init__(self, message: str, object_type: str, object_id: int | str) -> None:
        super().__init__(message)
        self.object_type = object_type
        self.object_id = object_id


def owned_tenant_ids(user) -> set[int]:
    """Tenants whose quotas `user` may see in full and administer."""
    if not user.is_authenticated:
        return set()
    if user.is_superuser:
        return set(Tenant.objects.values_list("pk", flat=True))
    return set(
        Membership.objects.filter(user=user, role__in=OWNER_ROLES).values_list(
            "workspace__tenant_id", flat=True
        )
    )


def is_quota_owner(user) -> bool:
    return bool(owned_tenant_ids(user))


def workspace_quotas(user) -> QuerySet[Quota]:
    """Quotas bound to the user's workspaces (what they can submit against)."""
    return Quota.objects.filter(workspaces__memberships__user=user).distinct()


def visible_quota_ids(user, owned: set[int] | None = None) -> set[int]:
    """Quota ids the user may see on the usage pages (one query, or two for owners)."""
    owned = owned_tenant_ids(user) if owned is None else owned
    ids = set(workspace_quotas(user).values_list("pk", flat=True))
    if owned:
        ids |= set(Quota.objects.filter(tenant_id__in=owned).values_list("pk", flat=True))
    return ids


def managed_tenant_ids(user) -> set[int]:
    """Tenants whose quotas, workspaces and members `user` may change on the owner pages:
    those they own (role quota owner or admin), or every tenant for staff."""
    if not user.is_authenticated:
        return set()
    if user.is_staff or user.is_superuser:
        return set(Tenant.objects.values_list("pk", flat=True))
    return owned_tenant_ids(user)


def get_tenant_for_user(user, pk: int | str) -> tuple[Tenant, bool]:
    """The tenant and whether the user may change it (owners, staff); members of any of its
    workspaces see it read-only; anyone else gets a 404 (its existence is not confirmed)."""
    pk = int(pk)
    tenant = Tenant.objects.filter(pk=pk).first() if 0 < pk <= MAX_ID else None
    if tenant is None or not user.is_authenticated:
        raise Http404("No such tenant")
    if user.is_staff or user.is_superuser:
        return tenant, True
    roles = set(
        Membership.objects.filter(user=user, workspace__tenant=tenant).values_list(
            "role", flat=True
        )
    )
    if not roles:
        raise HiddenObject("No such tenant", "tenant", pk)
    return tenant, bool(roles & set(OWNER_ROLES))


def last_owner_refusal(membership: Membership, new_role: str | None) -> str | None:
    """Why the membership may not lose its owner role (`new_role` None: removed), or None.
    A tenant keeps at least one quota owner or admin, or only staff could manage it again
    (docs/quota-tree.md "Owner pages")."""
    if membership.role not in OWNER_ROLES or new_role in OWNER_ROLES:
        return None
    others = Membership.objects.filter(
        workspace__tenant_id=membership.workspace.tenant_id, role__in=OWNER_ROLES
    ).exclude(pk=membership.pk)
    if others.exists():
        return None
    return (
        f"{membership.user.get_username()} is the last quota owner of "
        f"{membership.workspace.tenant.name}: make someone else quota owner or admin first."
    )


def get_workspace_for_user(user, pk: int) -> tuple[Workspace, bool]:
    """The workspace and whether the user may change it: owners of its tenant and staff
    change, its own members read; anyone else a 404."""
    workspace = (
        Workspace.objects.select_related("tenant").filter(pk=pk).first()
        if 0 < pk <= MAX_ID
        else None
    )
    if workspace is None:
        raise Http404("No such workspace")
    try:
        _, can_write = get_tenant_for_user(user, workspace.tenant_id)
    except Http404:
        raise HiddenObject("No such workspace", "workspace", pk) from None
    if not can_write and not workspace.memberships.filter(user=user).exists():
        raise HiddenObject("No such workspace", "workspace", pk)
    return workspace, can_write


def find_account(text: str) -> tuple[object | None, str]:
    """The active account with this username (exactly) or e-mail (any case), or None and
    why not (the owner pages' and the API's one rule)."""
    users = list(
        get_user_model()
        .objects.filter(Q(username=text) | Q(email__iexact=text), is_active=True)
        .order_by("pk")[:3]
    )
    exact = [u for u in users if u.get_username() == text]
    if exact:
        users = exact
    if not users:
        return None, f"No active user has the username or e-mail {text!r}."
    if len(users) > 1:
        return None, "Several users have that e-mail; give the username."
    return users[0], ""
