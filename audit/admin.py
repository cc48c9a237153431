"""The audit log in the admin: read-only, filterable, exportable as CSV (the selected
entries, or everything the current filters show)."""

import csv

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.urls import path
from django.utils import timezone

from audit.export import rows
from audit.models import AuditEntry


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_response(entries, name: str) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in rows(entries)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
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
