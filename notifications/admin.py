"""Admin: notification rules per workspace (and users' e-mail options), and the delivery
records with every attempt (read-only; failed ones can be retried)."""

from django import forms
from django.contrib import admin, messages
from django.utils import timezone

from notifications import outbound
from notifications.actions import retry_now
from notifications.models import Delivery, DeliveryAttempt, Event, NotificationRule


class RuleForm(forms.ModelForm):
    events = forms.MultipleChoiceField(
        choices=Event.choices, widget=forms.CheckboxSelectMultiple, required=False
    )

    class Meta:
        model = NotificationRule
        fields = ["name", "channel", "workspace", "user", "url", "secret", "events", "enabled"]
        widgets = {"secret": forms.PasswordInput(render_value=True)}

    def clean_url(self) -> str:
        url = self.cleaned_data.get("url", "")
        if url:
            try:
                outbound.vet(url)
            except outbound.RefusedDestination as exc:
                raise forms.ValidationError(str(exc)) from None
        return url

    def clean(self):
        data = super().clean()
        channel = data.get("channel")
        if channel == "email":
            if not data.get("user") or data.get("workspace"):
                raise forms.ValidationError("An e-mail rule names a user and no workspace.")
        elif not data.get("workspace") or not data.get("url"):
            raise forms.ValidationError("A webhook rule needs a workspace and a URL.")
        elif data.get("user"):
            raise forms.ValidationError("A webhook rule belongs to a workspace, not a user.")
        return data


@admin.register(NotificationRule)
class NotificationRuleAdmin(admin.ModelAdmin):
    form = RuleForm
    list_display = ["__str__", "channel", "workspace", "user", "enabled", "event_list"]
    list_filter = ["channel", "enabled", "workspace"]
    list_select_related = ["workspace", "user"]
    search_fields = ["name", "url", "workspace__name", "user__username"]
    raw_id_fields = ["user"]

    @admin.display(description="Events")
    def event_list(self, obj: NotificationRule) -> str:
        return ", ".join(obj.events or [])

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    fields = ["number", "at", "status_code", "error", "duration_ms"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "event",
        "job",
        "channel",
        "target",
        "status",
        "attempts",
        "last_status_code",
        "created_at",
        "delivered_at",
    ]
    list_filter = ["status", "event", "channel"]
    search_fields = ["target", "job__name", "last_error"]
    date_hierarchy = "created_at"
    inlines = [AttemptInline]
    actions = ["retry"]
    readonly_fields = [f.name for f in Delivery._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Retry the selected deliveries now")
    def retry(self, request, queryset) -> None:
        changed = retry_now(queryset, timezone.now())
        self.message_user(request, f"{changed} delivery(ies) will be retried.", messages.SUCCESS)
