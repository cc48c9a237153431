"""Admin for nodes (usage, cordon/uncordon), their GPUs (clear health marks) and agent
bootstrap tokens (shown once)."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.db.models import IntegerField, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.actions import issue_bootstrap_token, revoke_bootstrap_tokens
from agents.models import BootstrapToken
from cluster.actions import clear_health_marks, revoke_node_tokens, set_cordoned
from cluster.models import GpuDevice, Node
from jobs.statuses import ACTIVE_POD_STATUSES

_ACTIVE = [s.value for s in ACTIVE_POD_STATUSES]


class GpuDeviceInline(admin.TabularInline):
    model = GpuDevice
    extra = 0
    can_delete = False
    fields = [
        "index",
        "name",
        "uuid",
        "pci_bus_id",
        "memory_total_mb",
        "memory_used_mb",
        "utilization",
        "temperature",
        "ecc_errors",
        "mig",
        "healthy",
        "health_reason",
        "updated_at",
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="MIG")
    def mig(self, obj: GpuDevice) -> str:
        return mig_summary(obj)


def mig_summary(device: GpuDevice) -> str:
    if not device.mig_enabled:
        return "off"
    names = [str(m.get("name") or m.get("uuid") or "?") for m in device.mig_instances or []]
    return f"on: {len(names)} MIG device(s)" + (f" ({', '.join(names)})" if names else "")


CLEAR_HINT = (
    "Only Xid/ECC event marks can be cleared; a GPU the agent finds unhealthy on every "
    "sample (uncorrectable ECC errors since boot, missing from NVML, unreadable) stays "
    "unhealthy until it is reset or replaced."
)


def _clear_marks(admin_: admin.ModelAdmin, request, devices) -> None:
    cleared = clear_health_marks(devices, timezone.now())
    admin_.message_user(
        request,
        f"Cleared {cleared} GPU health mark(s); the agents drop them at their next "
        f"heartbeat and the GPUs are placed again once reported healthy. {CLEAR_HINT}",
        messages.SUCCESS if cleared else messages.WARNING,
    )


@admin.register(GpuDevice)
class GpuDeviceAdmin(admin.ModelAdmin):
    list_display = [
        "__str__",
        "uuid",
        "name",
        "utilization",
        "memory_used_mb",
        "memory_total_mb",
        "mig",
        "healthy",
        "health_reason",
        "updated_at",
    ]
    list_filter = ["healthy", "mig_enabled", "name"]
    list_select_related = ["node"]
    search_fields = ["node__name", "uuid", "pci_bus_id"]
    actions = ["clear_health_marks"]
    readonly_fields = [f.name for f in GpuDevice._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False  # agents report their GPUs

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="MIG")
    def mig(self, obj: GpuDevice) -> str:
        return mig_summary(obj)

    @admin.action(description="Clear the health marks of the selected GPUs (after a reset)")
    def clear_health_marks(self, request, queryset) -> None:
        _clear_marks(self, request, queryset)


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "state",
        "cordoned",
        "resource_type",
        "gpu_type",
        "gpus",
        "used_gpus",
        "last_heartbeat_at",
        "agent_version",
    ]
    list_filter = ["state", "cordoned", "resource_type", "gpu_type"]
    search_fields = ["name"]
    exclude = ["token_digest"]
    readonly_fields = [
        "state",
        "gpus",
        "cpus",
        "memory_gb",
        "gpu_type",
        "resource_type",
        "runtime",
        "agent_version",
        "last_heartbeat_at",
        "heartbeat_deadline",
        "token_prefix",
        "token_revoked_at",
        "created_at",
    ]
    inlines = [GpuDeviceInline]
    actions = ["cordon", "uncordon", "revoke_tokens", "clear_gpu_health_marks"]

    def has_add_permission(self, request) -> bool:
        return False  # nodes register themselves with a bootstrap token

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _used=Coalesce(
                    Sum("pods__gpus", filter=Q(pods__status__in=_ACTIVE)),
                    Value(0),
                    output_field=IntegerField(),
                )
            )
        )

    @admin.display(description="Used GPUs", ordering="_used")
    def used_gpus(self, obj: Node) -> int:
        return obj._used

    @admin.action(description="Cordon: place no new work on the selected nodes")
    def cordon(self, request, queryset) -> None:
        changed = set_cordoned(queryset, True)
        self.message_user(request, f"Cordoned {changed} node(s).", messages.SUCCESS)

    @admin.action(description="Uncordon the selected nodes")
    def uncordon(self, request, queryset) -> None:
        changed = set_cordoned(queryset, False)
        self.message_user(request, f"Uncordoned {changed} node(s).", messages.SUCCESS)

    @admin.action(description="Clear the GPU health marks of the selected nodes")
    def clear_gpu_health_marks(self, request, queryset) -> None:
        _clear_marks(self, request, GpuDevice.objects.filter(node__in=queryset))

    @admin.action(description="Revoke the node tokens (the agents must register again)")
    def revoke_tokens(self, request, queryset) -> None:
        changed = revoke_node_tokens(queryset, timezone.now())
        self.message_user(
            request,
            f"Revoked the token of {changed} node(s); their agents are refused from now on "
            "and need a new bootstrap token.",
            messages.SUCCESS,
        )


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
        changed = revoke_bootstrap_tokens(queryset, timezone.now())
        self.message_user(request, f"Revoked {changed} token(s).", messages.SUCCESS)
