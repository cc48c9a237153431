"""Admin for quota owners: tenants, workspaces with members, quotas with live usage."""

from django.contrib import admin
from django.db.models import Count, IntegerField, Q, Sum, Value
from django.db.models.functions import Coalesce

from jobs.statuses import ACTIVE_POD_STATUSES
from quotas.models import Membership, Quota, Tenant, Workspace

_ACTIVE = [s.value for s in ACTIVE_POD_STATUSES]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    raw_id_fields = ["user"]


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "member_count", "created_at"]
    list_filter = ["tenant"]
    list_select_related = ["tenant"]
    search_fields = ["name", "tenant__name"]
    filter_horizontal = ["quotas"]
    inlines = [MembershipInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_members=Count("memberships"))

    @admin.display(description="Members", ordering="_members")
    def member_count(self, obj: Workspace) -> int:
        return obj._members


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
