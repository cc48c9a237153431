"""Read-only admin for jobs (the audit trail) with an immediate "terminate" action. Quota
owners see their tenants' jobs only (`quotas.admin_scope.TenantScopedAdmin`)."""

from django.contrib import admin, messages

from jobs.actions.stop import JobNotActive, request_stop
from jobs.actions.transitions import TransitionConflict
from jobs.models import Job, JobEvent, Pod
from policy.secrets import redact_env
from policy.statuses import JobStatus
from quotas.admin_scope import TenantScopedAdmin


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
    # Env values marked secret are shown to no one, here neither (policy.secrets).
    exclude = ["env"]
    readonly_fields = ["environment"]

    @admin.display(description="Environment (secret values redacted)")
    def environment(self, obj: Job) -> str:
        return "; ".join(f"{k}={v}" for k, v in redact_env(obj.env or {}).items()) or "—"

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
