"""Read-only admin for jobs (the audit trail) with an immediate "terminate" action, and the
quotas with their live usage (GPUs of live workers charged to each), who uses and who
borrows each one, and a warning when guarantees promise more GPUs than the cluster has.
Quota owners see their tenants' rows only (`quotas.admin.TenantScopedAdmin`)."""

from django.contrib import admin, messages
from django.db.models import IntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils.html import format_html, format_html_join

from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.transitions import TransitionConflict
from jobs.models import Job, JobEvent, Pod
from policy.statuses import ACTIVE_POD_STATUSES, JobStatus
from policy.tree_rules import overcommitted
from quotas.admin import QuotaWritesAdmin, TenantScopedAdmin
from quotas.models import Quota

_ACTIVE = [s.value for s in ACTIVE_POD_STATUSES]


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class PodInline(_ReadOnlyInline):
    model = Pod
    fields = [
        "attempt",
        "rank",
        "node",
        "gpu_indices",
        "charged_quota",
        "in_quota",
        "status",
        "exit_code",
        "status_reason",
    ]
    readonly_fields = fields
    ordering = ["-attempt", "rank"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("node", "charged_quota")


class JobEventInline(_ReadOnlyInline):
    model = JobEvent
    fields = ["created_at", "attempt", "from_status", "to_status", "reason", "actor", "user"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user")


@admin.register(Job)
class JobAdmin(TenantScopedAdmin):
    tenant_lookup = "workspace__tenant_id"
    owner_may = ("view",)
    list_display = [
        "id",
        "name",
        "status",
        "workspace",
        "quota",
        "owner",
        "workers",
        "gpus_per_worker",
        "priority",
        "created_at",
    ]
    list_filter = ["status", "idle_resources", "quota"]
    list_select_related = ["workspace__tenant", "quota", "owner"]
    search_fields = ["name", "image", "owner__username"]
    date_hierarchy = "created_at"
    inlines = [PodInline, JobEventInline]
    actions = ["terminate"]

    # Jobs change only through jobs.actions, never by editing rows.
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Terminate the selected jobs now (no grace period)")
    def terminate(self, request, queryset) -> None:
        who = request.user.get_username()
        done, finished, raced = 0, 0, 0
        for job in queryset:
            try:
                request_stop(
                    job,
                    user=request.user,
                    reason=f"terminated by admin {who}",
                    final_status=JobStatus.TERMINATED,
                )
                done += 1
            except JobNotActive:
                finished += 1
            except TransitionConflict:
                raced += 1
        self.message_user(request, f"Terminating {done} job(s).", messages.SUCCESS)
        if finished:
            self.message_user(request, f"{finished} job(s) had already finished.", messages.WARNING)
        if raced:
            self.message_user(
                request, f"{raced} job(s) kept changing; try again.", messages.WARNING
            )


def _gpus(**extra) -> Coalesce:
    """GPUs of live workers charged to the quota: a subquery over the live pods (partial
    index pod_active_by_quota), not a join with every pod ever charged to it."""
    live = Pod.objects.filter(charged_quota=OuterRef("pk"), status__in=_ACTIVE, **extra)
    total = live.order_by().values("charged_quota").annotate(total=Sum("gpus")).values("total")
    return Coalesce(Subquery(total, output_field=IntegerField()), Value(0))


def overcommitted_pools() -> list[str]:
    """Warnings for GPU types whose quotas guarantee more GPUs than the cluster's nodes have
    (the scheduler's own accounting, policy.accounting)."""
    from jobs.forecast import current_snapshot
    from policy.accounting import account

    return [
        overcommitted(pool.guaranteed, pool.total, pool.resource_type, pool.gpu_type)
        for pool in account(current_snapshot()).pools
        if pool.overcommitted
    ]


def _pod_rows(rows) -> str:
    """(job id, name, owner, workspace, GPUs, other quota) as table rows. Borrowing never
    crosses tenants (docs/scheduling.md), so whoever may see the quota owns every job listed."""
    return format_html_join(
        "", "<tr><td>#{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows
    )


@admin.register(Quota)
class QuotaAdmin(QuotaWritesAdmin):
    owner_may = ("view", "change", "add")
    readonly_fields = ["who_uses_it"]
    list_display = [
        "name",
        "tenant",
        "resource_type",
        "gpu_type",
        "gpus",
        "parent",
        "max_gpus",
        "used_gpus",
        "lent_gpus",
        "preemption",
    ]
    list_filter = ["tenant", "resource_type", "gpu_type"]
    list_select_related = ["tenant", "parent"]
    search_fields = ["name"]

    def get_queryset(self, request):
        # One aggregate query for the whole page: GPUs of live workers charged to each quota,
        # split into its own jobs and idle jobs borrowing it (docs/scheduling.md).
        return super().get_queryset(request).annotate(_used=_gpus(), _lent=_gpus(in_quota=False))

    @admin.display(description="Used GPUs", ordering="_used")
    def used_gpus(self, obj: Quota) -> int:
        return obj._used

    @admin.display(description="Lent to idle jobs", ordering="_lent")
    def lent_gpus(self, obj: Quota) -> int:
        return obj._lent

    @admin.display(description="Who uses and borrows it now")
    def who_uses_it(self, obj: Quota) -> str:
        """Jobs holding GPUs charged to this quota (its own and borrowers), and this quota's
        jobs running on other quotas' capacity (two queries)."""
        if obj.pk is None:
            return "—"
        live = Pod.objects.filter(status__in=_ACTIVE)
        fields = ("job_id", "job__name", "job__owner__username", "job__workspace__name")
        here = (
            live.filter(charged_quota=obj)
            .values_list(*fields, "job__quota__name")
            .annotate(gpus=Sum("gpus"))
            .order_by("job_id")
        )
        away = (
            live.filter(job__quota=obj)
            .exclude(charged_quota=obj)
            .values_list(*fields, "charged_quota__name")
            .annotate(gpus=Sum("gpus"))
            .order_by("job_id")
        )
        head = (
            "<table><thead><tr><th>Job</th><th>Name</th><th>Owner</th><th>Workspace</th>"
            "<th>GPUs</th><th>{}</th></tr></thead><tbody>{}</tbody></table>"
        )
        users = [(*row[:4], row[5], row[4]) for row in here]
        borrows = [(*row[:4], row[5], row[4]) for row in away]
        return format_html(
            "<p><strong>Using its capacity</strong> (its own jobs and borrowers)</p>"
            + head
            + "<p><strong>Its jobs on other quotas' capacity</strong></p>"
            + head,
            "Job's quota",
            _pod_rows(users) or format_html("<tr><td colspan=6>{}</td></tr>", "nobody"),
            "Borrows from",
            _pod_rows(borrows) or format_html("<tr><td colspan=6>{}</td></tr>", "none"),
        )

    def changelist_view(self, request, extra_context=None):
        for warning in overcommitted_pools():
            messages.warning(request, warning)
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if request.method == "GET":
            for warning in overcommitted_pools():
                messages.warning(request, warning)
        return super().change_view(request, object_id, form_url, extra_context)
