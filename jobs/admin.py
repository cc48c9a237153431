"""Read-only admin for jobs (the audit trail) with an immediate "terminate" action, and the
quotas with their live usage (GPUs of live workers charged to each)."""

from django.contrib import admin, messages
from django.db.models import IntegerField, Q, Sum, Value
from django.db.models.functions import Coalesce

from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.transitions import TransitionConflict
from jobs.models import Job, JobEvent, Pod
from jobs.statuses import ACTIVE_POD_STATUSES, JobStatus
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
class JobAdmin(admin.ModelAdmin):
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
    return Coalesce(
        Sum("charged_pods__gpus", filter=Q(charged_pods__status__in=_ACTIVE, **extra)),
        Value(0),
        output_field=IntegerField(),
    )


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "tenant",
        "resource_type",
        "gpu_type",
        "gpus",
        "used_gpus",
        "lent_gpus",
        "preemption",
    ]
    list_filter = ["tenant", "resource_type", "gpu_type"]
    list_select_related = ["tenant"]
    search_fields = ["name"]

    def get_queryset(self, request):
        # One aggregate query for the whole page: GPUs of live workers charged to each quota,
        # split into its own jobs and idle jobs borrowing it (DESIGN §5).
        return (
            super()
            .get_queryset(request)
            .annotate(_used=_gpus(), _lent=_gpus(charged_pods__in_quota=False))
        )

    @admin.display(description="Used GPUs", ordering="_used")
    def used_gpus(self, obj: Quota) -> int:
        return obj._used

    @admin.display(description="Lent to idle jobs", ordering="_lent")
    def lent_gpus(self, obj: Quota) -> int:
        return obj._lent
