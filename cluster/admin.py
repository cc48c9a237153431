"""Admin for nodes (usage, jobs per node, cordon, drain, tokens, re-registration) and their
GPUs (clear health marks). Quota owners see the nodes (they are shared by every tenant) and
may cordon, drain and uncordon them. The agents' bootstrap tokens and registration records
are administered by the agents app (agents.admin).

A shell over three rooms (tests/architecture/rules.py: `cluster.admin`): the inventory
(cluster), the live workers on each node (jobs) and the operator's consent to a
re-registration, which the agents app records. Nothing imports it."""

from contextvars import ContextVar

from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from agents.actions import allow_reregistration
from cluster.actions import clear_health_marks, revoke_node_tokens, set_cordoned
from cluster.actions import drain as drain_nodes
from cluster.models import GpuDevice, Node
from jobs.models import Pod
from policy.statuses import ACTIVE_POD_STATUSES
from quotas.admin_scope import TenantScopedAdmin, owned_by

_ACTIVE = [s.value for s in ACTIVE_POD_STATUSES]
# The tenants of the user viewing a node page (None: every tenant), for `jobs_here`.
_viewer_tenants: ContextVar[set[int] | None] = ContextVar("node_viewer_tenants", default=None)


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
class NodeAdmin(TenantScopedAdmin):
    tenant_lookup = ""  # nodes are shared: owners see them all
    owner_may = ("view",)
    ordering = ["name"]
    list_display = [
        "name",
        "state",
        "cordoned",
        "drain_state",
        "job_count",
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
        "reregistration_allowed_at",
        "created_at",
        "drain_requested_at",
        "jobs_here",
    ]
    inlines = [GpuDeviceInline]
    actions = [
        "cordon",
        "drain",
        "uncordon",
        "revoke_tokens",
        "allow_reregistration",
        "clear_gpu_health_marks",
    ]

    def has_add_permission(self, request) -> bool:
        return False  # nodes register themselves with a bootstrap token

    def get_queryset(self, request):
        # Subqueries over the live workers (the partial index pod_active_by_node), not a
        # join with every pod the node ever ran.
        live = Pod.objects.filter(node=OuterRef("pk"), status__in=_ACTIVE).order_by()
        used = live.values("node").annotate(total=Sum("gpus")).values("total")
        jobs = live.values("node").annotate(total=Count("job", distinct=True)).values("total")
        return (
            super()
            .get_queryset(request)
            .annotate(
                _used=Coalesce(Subquery(used, output_field=IntegerField()), Value(0)),
                _jobs=Coalesce(Subquery(jobs, output_field=IntegerField()), Value(0)),
            )
        )

    @admin.display(description="Jobs", ordering="_jobs")
    def job_count(self, obj: Node) -> int:
        return obj._jobs

    @admin.display(description="Drain")
    def drain_state(self, obj: Node) -> str:
        if obj.drain_requested_at is None:
            return "—"
        left = getattr(obj, "_jobs", None)
        return f"draining, {left} job(s) left" if left else "drained"

    @admin.display(description="Jobs on this node")
    def jobs_here(self, obj: Node) -> str:
        """Live workers here grouped by job (one query); jobs of other tenants are shown to
        a quota owner by number only."""
        rows = (
            Pod.objects.filter(node=obj, status__in=_ACTIVE)
            .values_list(
                "job_id",
                "job__name",
                "job__owner__username",
                "job__quota__name",
                "job__workspace__tenant_id",
                "job__status",
            )
            .annotate(workers=Count("id"), gpus=Sum("gpus"))
            .order_by("job_id")
        )
        owned = _viewer_tenants.get()
        shown = [
            (job_id, name, owner, quota, status, workers, gpus)
            if owned is None or tenant in owned
            else (job_id, "(another tenant)", "—", quota, status, workers, gpus)
            for job_id, name, owner, quota, tenant, status, workers, gpus in rows
        ]
        if not shown:
            return "no live workers"
        return format_html(
            "<table><thead><tr><th>Job</th><th>Name</th><th>Owner</th><th>Quota</th>"
            "<th>Status</th><th>Workers</th><th>GPUs</th></tr></thead><tbody>{}</tbody></table>",
            format_html_join(
                "",
                "<tr><td>#{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                "<td>{}</td></tr>",
                shown,
            ),
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Quota owners see other tenants' jobs on a node by number only (a context variable:
        # the admin object is shared by concurrent requests).
        token = _viewer_tenants.set(None if request.user.is_superuser else owned_by(request))
        try:
            response = super().change_view(request, object_id, form_url, extra_context)
            if hasattr(response, "render"):
                response.render()
            return response
        finally:
            _viewer_tenants.reset(token)

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

    @admin.action(description="Drain: place no new work; let the running work finish")
    def drain(self, request, queryset):
        nodes = list(queryset)
        if request.POST.get("confirm") != "yes":  # a drain takes nodes out of service: ask
            return TemplateResponse(
                request,
                "admin/cluster/node/drain_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Drain these nodes?",
                    "nodes": nodes,
                    "opts": self.model._meta,
                    "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                },
            )
        changed = drain_nodes(queryset, timezone.now())
        self._history(request, nodes, "drain: no new work is placed here; running work finishes")
        self.message_user(
            request,
            f"Draining {changed} node(s): nothing new is placed there and running jobs "
            "finish on their own.",
            messages.SUCCESS,
        )

    @admin.action(description="Uncordon the selected nodes (ends a drain)")
    def uncordon(self, request, queryset) -> None:
        nodes = list(queryset)
        changed = set_cordoned(queryset, False)
        self._history(request, nodes, "uncordon: open for new work again")
        self.message_user(request, f"Uncordoned {changed} node(s).", messages.SUCCESS)

    @admin.action(
        description="Clear the GPU health marks of the selected nodes", permissions=["change"]
    )
    def clear_gpu_health_marks(self, request, queryset) -> None:
        nodes = list(queryset)
        _clear_marks(self, request, GpuDevice.objects.filter(node__in=queryset))
        self._history(request, nodes, "clear_health_marks: GPU health marks cleared")

    @admin.action(
        description="Revoke the node tokens (the agents must register again)",
        permissions=["change"],
    )
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

    @admin.action(description="Allow re-registration: the next agent registering the name takes it")
    def allow_reregistration(self, request, queryset) -> None:
        nodes = list(queryset)
        changed = allow_reregistration(queryset, request.user, timezone.now())
        self._history(request, nodes, "allow_reregistration: the next registration takes it")
        self.message_user(
            request,
            f"The next registration of {changed} node name(s) will replace the node's token "
            "(the agent running there now is locked out then). Recorded under Registrations.",
            messages.WARNING,
        )
