"""The audit log in the admin: read-only, filterable, exportable as CSV (the selected
entries, or everything the current filters show). Quota owners see their tenants' entries
only (`audit.tenants`, the owners' audit page's filter)."""

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.urls import path
from django.utils import timezone

from audit.export import csv_response
from audit.models import AuditEntry
from audit.tenants import tenant_filter
from quotas.admin_scope import TenantScopedAdmin, owned_by


@admin.register(AuditEntry)
class AuditEntryAdmin(TenantScopedAdmin):
    tenant_lookup = ""  # not a column: the entries of the owner's tenants (get_queryset)
    owner_may = ("view",)
    list_display = [
        "at",
        "action",
        "actor_name",
        "object_type",
        "object_repr",
        "source_address",
        "via",
    ]
    list_filter = ["action", "via", "object_type", "at"]
    search_fields = ["actor_name", "object_repr", "object_id", "source_address", "action"]
    date_hierarchy = "at"
    list_per_page = 100
    actions = ["export_selected"]
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    # The log is written only by audit.actions; nobody edits or deletes it here.
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest):
        queryset = super().get_queryset(request)
        if self._scoped(request):
            return queryset.filter(tenant_filter(owned_by(request)))
        return queryset

    def get_urls(self):
        export = self.admin_site.admin_view(self.export_filtered)
        return [path("export/", export, name="audit_auditentry_export"), *super().get_urls()]

    def _file_name(self) -> str:
        return f"audit-{timezone.now():%Y%m%d-%H%M%S}.csv"

    def export_filtered(self, request: HttpRequest) -> HttpResponse:
        """Everything the change list shows with the same filters and search, as CSV."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("unknown filter")
        entries = changelist.get_queryset(request).order_by("-at", "-id")
        return csv_response(entries.iterator(2000), self._file_name())

    @admin.action(description="Export the selected entries as CSV")
    def export_selected(self, request, queryset):
        return csv_response(queryset.order_by("-at", "-id").iterator(2000), self._file_name())
