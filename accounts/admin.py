"""Admin for researchers' API tokens: see who has one and revoke it."""

from django.contrib import admin, messages

from accounts.actions import revoke_api_tokens
from accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    list_select_related = ["user"]
    search_fields = ["prefix", "user__username", "name"]
    exclude = ["digest"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False  # researchers create their own on the "API token" page (shown once)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        # The admin's history ("revoke: …") is mirrored into the audit log.
        for token in queryset.filter(revoked_at__isnull=True):
            self.log_change(request, token, "revoke: API token revoked by an admin")
        changed = revoke_api_tokens(queryset)
        self.message_user(request, f"Revoked {changed} token(s).", messages.SUCCESS)
