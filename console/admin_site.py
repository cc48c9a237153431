"""The admin site: staff as usual, plus quota owners, who see only their tenants' quotas,
workspaces and jobs, and the nodes (to cordon or drain them). See `quotas.admin_scope`'s
`TenantScopedAdmin` for how each model is scoped."""

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest


class ConsoleAdminSite(admin.AdminSite):
    site_header = "GPU console administration"
    site_title = "GPU console admin"
    index_title = "Quotas, nodes and jobs"

    def has_permission(self, request: HttpRequest) -> bool:
        from quotas.access import is_quota_owner

        user = request.user
        return user.is_active and (user.is_staff or is_quota_owner(user))


class ConsoleAdminConfig(AdminConfig):
    """`django.contrib.admin` with this site as `admin.site` (INSTALLED_APPS names this)."""

    default_site = "console.admin_site.ConsoleAdminSite"
