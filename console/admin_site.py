"""The admin site: staff as usual, plus quota owners (role quota owner or admin in a
workspace; not staff), who see only their tenants' quotas, workspaces, members, jobs and
audit entries, and the nodes (to cordon or drain them). See `quotas.admin_scope`'s
`TenantScopedAdmin` for how each model is scoped; what owners may do with each model is
the permissions of the "Quota owners" group (created with `QUOTA_OWNER_PERMISSIONS` the
first time an owner comes in; docs/quota-tree.md "Quota owners in the admin")."""

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest

QUOTA_OWNERS = "Quota owners"
QUOTA_OWNER_PERMISSIONS = [
    "quotas.view_quota",
    "quotas.add_quota",
    "quotas.change_quota",
    "quotas.view_workspace",
    "quotas.add_workspace",
    "quotas.change_workspace",
    "quotas.view_membership",
    "quotas.add_membership",
    "quotas.change_membership",
    "quotas.delete_membership",
    "jobs.view_job",
    "cluster.view_node",
    "audit.view_auditentry",
]


class ConsoleAdminSite(admin.AdminSite):
    site_header = "GPU console administration"
    site_title = "GPU console admin"
    index_title = "Quotas, nodes and jobs"

    def has_permission(self, request: HttpRequest) -> bool:
        from accounts.actions import permission_group
        from quotas.access import is_quota_owner

        user = request.user
        if not user.is_active:
            return False
        owner = is_quota_owner(user)
        if owner:  # what the scoped admins let owners do (quotas.admin_scope reads it)
            request.quota_owner_perms = permission_group(QUOTA_OWNERS, QUOTA_OWNER_PERMISSIONS)
        return user.is_staff or owner


class ConsoleAdminConfig(AdminConfig):
    """`django.contrib.admin` with this site as `admin.site` (INSTALLED_APPS names this)."""

    default_site = "console.admin_site.ConsoleAdminSite"
