"""Admin for nodes (usage, cordon/uncordon) and agent bootstrap tokens (shown once)."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.db.models import IntegerField, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.actions import issue_bootstrap_token, revoke_bootstrap_tokens
from agents.models import BootstrapToken
from cluster.actions import revoke_node_tokens, set_cordoned
from cluster.models import GpuDevice, Node
from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.transitions import TransitionConflict
from jobs.models import Job, Pod
from jobs.statuses import ACTIVE_POD_STATUSES, JobStatus

_ACTIVE = [s.value for s in ACTIVE_POD_STATUSES]


class GpuDeviceInline(admin.TabularInline):
    model = GpuDevice
    extra = 0
    can_delete = False
    fields = [
        "index",
        "name",
        "uuid",
        "memory_total_mb",
        "memory_used_mb",
        "utilization",
        "temperature",
        "ecc_errors",
        "healthy",
        "health_reason",
        "updated_at",
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


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
    actions = ["cordon", "uncordon", "drain", "revoke_tokens"]

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

    # Each action writes the admin's history ("<verb>: …"), which the audit log mirrors.
    def _history(self, request, nodes, message: str) -> None:
        for node in nodes:
            self.log_change(request, node, message)

    @admin.action(description="Cordon: place no new work on the selected nodes")
    def cordon(self, request, queryset) -> None:
        nodes = list(queryset)
        changed = set_cordoned(queryset, True)
        self._history(request, nodes, "cordon: no new work is placed here")
        self.message_user(request, f"Cordoned {changed} node(s).", messages.SUCCESS)

    @admin.action(description="Uncordon the selected nodes")
    def uncordon(self, request, queryset) -> None:
        nodes = list(queryset)
        changed = set_cordoned(queryset, False)
        self._history(request, nodes, "uncordon: open for new work again")
        self.message_user(request, f"Uncordoned {changed} node(s).", messages.SUCCESS)

    @admin.action(description="Drain: cordon, then preempt the jobs running there (gracefully)")
    def drain(self, request, queryset) -> None:
        """Jobs with Automatic Fault Tolerance restart elsewhere from their last checkpoint;
        the others end Preempted (a restart submits them again)."""
        nodes = list(queryset)
        set_cordoned(queryset, True)
        who = request.user.get_username()
        preempted = 0
        for node in nodes:
            job_ids = (
                Pod.objects.filter(node=node, status__in=_ACTIVE)
                .values_list("job_id", flat=True)
                .distinct()
            )
            for job in Job.objects.filter(pk__in=list(job_ids)):
                try:
                    request_stop(
                        job,
                        user=request.user,
                        reason=f"node {node.name} drained by {who}",
                        final_status=JobStatus.PREEMPTED,
                    )
                    preempted += 1
                except (JobNotActive, TransitionConflict):
                    continue
            self.log_change(request, node, "drain: cordoned; its jobs preempted")
        self.message_user(
            request,
            f"Drained {len(nodes)} node(s): {preempted} job(s) asked to stop.",
            messages.SUCCESS,
        )

    @admin.action(description="Revoke the node tokens (the agents must register again)")
    def revoke_tokens(self, request, queryset) -> None:
        nodes = list(queryset)
        changed = revoke_node_tokens(queryset, timezone.now())
        self._history(request, nodes, "revoke_token: the agent must register again")
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
        for token in queryset.filter(revoked_at__isnull=True):
            self.log_change(request, token, "revoke: bootstrap token revoked")
        changed = revoke_bootstrap_tokens(queryset, timezone.now())
        self.message_user(request, f"Revoked {changed} token(s).", messages.SUCCESS)
