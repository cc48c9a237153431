"""Admin for the agents' bootstrap tokens (shown once) and the registration records of node
names (read-only); tokens stay with the operators. The nodes and their GPUs are
administered by the cluster app (cluster.admin)."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.utils import timezone

from agents.actions import issue_bootstrap_token, revoke_bootstrap_tokens
from agents.models import BootstrapToken, RegistrationRecord


@admin.register(RegistrationRecord)
class RegistrationRecordAdmin(admin.ModelAdmin):
    """Every registration of a node name, refused attempts and operators' consents included:
    read-only."""

    list_display = ["created_at", "name", "outcome", "remote_addr", "bootstrap_prefix", "user"]
    list_filter = ["outcome"]
    list_select_related = ["user"]
    search_fields = ["name", "remote_addr", "bootstrap_prefix"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class BootstrapTokenAddForm(forms.ModelForm):
    ttl_hours = forms.IntegerField(
        label="Valid for (hours)", min_value=1, max_value=24 * 365, initial=24
    )

    class Meta:
        model = BootstrapToken
        fields = ["note", "single_use"]


@admin.register(BootstrapToken)
class BootstrapTokenAdmin(admin.ModelAdmin):
    list_display = [
        "prefix",
        "note",
        "created_by",
        "created_at",
        "expires_at",
        "single_use",
        "used_at",
        "revoked_at",
    ]
    list_filter = ["single_use"]
    list_select_related = ["created_by"]
    search_fields = ["note", "prefix"]
    exclude = ["digest"]
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = BootstrapTokenAddForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return [
            "note",
            "prefix",
            "created_by",
            "created_at",
            "expires_at",
            "single_use",
            "used_at",
            "revoked_at",
        ]

    def save_model(self, request, obj, form, change) -> None:
        if change:
            return  # tokens are immutable; revoke instead
        data = form.cleaned_data
        row, plain = issue_bootstrap_token(
            request.user,
            data["note"],
            single_use=data["single_use"],
            ttl=timedelta(hours=data["ttl_hours"]),
        )
        # The admin logs and links the object it saved: make `obj` the row just created.
        obj.__dict__.update({k: v for k, v in row.__dict__.items() if k != "_state"})
        obj._state.adding = False
        messages.warning(
            request,
            f"Bootstrap token (copy it now, it is shown only once): {plain}  "
            f"— start the agent with it; it expires {row.expires_at:%Y-%m-%d %H:%M} UTC.",
        )

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        for token in queryset.filter(revoked_at__isnull=True):
            self.log_change(request, token, "revoke: bootstrap token revoked")
        changed = revoke_bootstrap_tokens(queryset, timezone.now())
        self.message_user(request, f"Revoked {changed} token(s).", messages.SUCCESS)
