"""Admin for quota owners: tenants and workspaces with members. (Quotas, shown with their
live usage, are registered by jobs.admin: usage is counted from pods.)"""

from django.contrib import admin
from django.db.models import Count

from quotas.models import Membership, Tenant, Workspace


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    raw_id_fields = ["user"]


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "member_count", "created_at"]
    list_filter = ["tenant"]
    list_select_related = ["tenant"]
    search_fields = ["name", "tenant__name"]
    filter_horizontal = ["quotas"]
    inlines = [MembershipInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_members=Count("memberships"))

    @admin.display(description="Members", ordering="_members")
    def member_count(self, obj: Workspace) -> int:
        return obj._members
