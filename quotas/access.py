"""Who sees which quotas and tenants: researchers see the quotas bound to their workspaces;
quota owners (role quota owner or admin in a workspace of a tenant) see every quota of that
tenant; superusers see every tenant."""

from django.db.models import QuerySet

from quotas.models import Membership, Quota, Role, Tenant

OWNER_ROLES = (Role.QUOTA_OWNER, Role.ADMIN)


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
