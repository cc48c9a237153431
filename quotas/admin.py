"""Admin for quota owners: tenants, workspaces with members, and quotas with their live
usage (GPUs of live workers charged to each), who uses and who borrows each one, and a
warning when guarantees promise more GPUs than the cluster has. Quota owners see their
tenants' rows only (`quotas.admin_scope.TenantScopedAdmin`).

Every write goes through `quotas.actions` (audited, and a scheduling cycle requested):
`save_model`, `delete_model`, `delete_queryset` and the inlines' `save_formset`.

A shell over two rooms (tests/architecture/rules.py: `quotas.admin`): the quota tree
(quotas) and the live workers charged to each quota (jobs). Nothing imports it.
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.forms.models import BaseInlineFormSet
from django.http import HttpResponseRedirect
from django.utils.html import format_html, format_html_join

from jobs.actions.quota_changes import change_quota, describe
from jobs.models import Pod
from policy.statuses import ACTIVE_POD_STATUSES
from policy.tree_rules import overcommitted
from quotas import actions
from quotas.access import last_owner_refusal
from quotas.actions import NON_FIELD
from quotas.admin_scope import TenantScopedAdmin, owner_may_model
from quotas.models import Membership, Quota, Tenant, Workspace

_ACTIVE = [s.value for s in ACTIVE_POD_STATUSES]


def _model_fields(form: forms.ModelForm) -> dict:
    """The form's cleaned values of the model's own columns (not its many-to-many)."""
    names = {f.name for f in form._meta.model._meta.concrete_fields}
    return {name: value for name, value in form.cleaned_data.items() if name in names}


def _add_errors(form: forms.BaseForm, errors: dict[str, list[str]]) -> None:
    for name, problems in errors.items():
        form.add_error(name if name in form.fields else None, problems)


class QuotaForm(forms.ModelForm):
    """The model's validation, then the one path of a quota change
    (`jobs.actions.quota_changes.change_quota`, the owner pages' and the API's): its field
    errors, and its preview. A change is saved only when posted again with the token of
    the state the preview showed (`preview_token`); before, the preview is the form's
    error and nothing is saved."""

    preview_token = forms.CharField(required=False, widget=forms.HiddenInput)

    class Meta:
        model = Quota
        fields = "__all__"  # noqa: DJ007 (the admin's fieldsets decide what is shown)

    def _post_clean(self) -> None:
        super()._post_clean()  # the instance now holds the submitted values
        self.confirmed_token: str | None = None
        if self.errors:
            return
        quota = self.instance if self.instance.pk else None
        if quota is not None and not (set(self.changed_data) - {"preview_token"}):
            return  # nothing to preview
        outcome = change_quota(tenant=self.instance.tenant, quota=quota, values=_model_fields(self))
        if outcome.errors:
            _add_errors(self, outcome.errors)
            return
        posted = self.cleaned_data.get("preview_token") or ""
        if posted == outcome.token:
            self.confirmed_token = posted
            return
        assert outcome.preview is not None
        self.data = self.data.copy()  # the next post names the state previewed now
        self.data[self.add_prefix("preview_token")] = outcome.token
        head = (
            "The state changed since that preview; this is what the change would do now."
            if posted
            else "Nothing is saved yet."
        )
        self.add_error(
            None,
            [
                f"{head} Save again to confirm. What the next scheduling cycle would do:",
                *describe(outcome.preview),
            ],
        )


class QuotaWritesAdmin(TenantScopedAdmin):
    """Quotas written through the one path of a quota change (`QuotaAdmin` adds the
    usage)."""

    form = QuotaForm

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """A change refused at the save (the state moved between the form's check and the
        save, or a rule it broke meanwhile) is the form again with the reason, never a 500:
        the save's transaction is rolled back, nothing is written."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except actions.QuotaChangeRefused as exc:
            reasons = " ".join(m for messages in exc.errors.values() for m in messages)
            self.message_user(
                request,
                f"Not saved: {reasons} The form shows the quota as it is now; check and save "
                "again.",
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request, obj: Quota, form, change: bool) -> None:
        outcome = change_quota(
            tenant=obj.tenant,
            quota=obj if change else None,
            values=_model_fields(form),
            actor=request.user,
            save=True,
            token=getattr(form, "confirmed_token", None),
        )
        if outcome.saved is None:  # refused or moved since the form was checked
            raise actions.QuotaChangeRefused(outcome.errors or {NON_FIELD: ["state changed"]})
        obj.pk, obj.created_at = outcome.saved.pk, outcome.saved.created_at

    def delete_model(self, request, obj: Quota) -> None:
        actions.delete_quota(obj, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for quota in queryset:
            actions.delete_quota(quota, actor=request.user)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    ordering = ["name"]
    list_display = ["name", "created_at"]
    search_fields = ["name"]

    def save_model(self, request, obj: Tenant, form, change: bool) -> None:
        if change:
            actions.update_tenant(obj, actor=request.user)
        else:
            created = actions.create_tenant(obj.name, actor=request.user)
            obj.pk, obj.created_at = created.pk, created.created_at

    def delete_model(self, request, obj: Tenant) -> None:
        actions.delete_tenant(obj, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for tenant in queryset:
            actions.delete_tenant(tenant, actor=request.user)


class MembershipFormSet(BaseInlineFormSet):
    """A quota owner (not staff) may not demote or remove the tenant's last owner here
    either (`quotas.access.last_owner_refusal`, the owner pages' rule)."""

    actor: Any = None

    def clean(self) -> None:
        super().clean()
        if self.actor is None or self.actor.is_staff or self.actor.is_superuser:
            return
        for form in self.initial_forms:
            if not getattr(form, "cleaned_data", None):
                continue
            removed = self._should_delete_form(form)
            if not removed and "role" not in form.changed_data:
                continue
            before = Membership.objects.select_related("workspace__tenant", "user").get(
                pk=form.instance.pk
            )
            refusal = last_owner_refusal(before, None if removed else form.cleaned_data["role"])
            if refusal:
                raise forms.ValidationError(refusal)


class MembershipInline(admin.TabularInline):
    model = Membership
    formset = MembershipFormSet
    extra = 1
    raw_id_fields = ["user"]

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        formset.actor = request.user
        return formset

    # Quota owners manage the members of their tenants' workspaces (the workspace admin
    # shows them only their tenants' workspaces), as the "Quota owners" group allows.
    def has_view_permission(self, request, obj=None) -> bool:
        return super().has_view_permission(request, obj) or owner_may_model(
            request, Membership, "view"
        )

    def has_change_permission(self, request, obj=None) -> bool:
        return super().has_change_permission(request, obj) or owner_may_model(
            request, Membership, "change"
        )

    def has_add_permission(self, request, obj=None) -> bool:
        return super().has_add_permission(request, obj) or owner_may_model(
            request, Membership, "add"
        )

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) or owner_may_model(
            request, Membership, "delete"
        )


class WorkspaceForm(forms.ModelForm):
    class Meta:
        model = Workspace
        fields = "__all__"  # noqa: DJ007 (the admin's fieldsets decide what is shown)

    def clean(self) -> dict:
        data = super().clean()
        tenant, quotas = data.get("tenant"), data.get("quotas") or []
        foreign = [q.name for q in quotas if tenant is not None and q.tenant_id != tenant.pk]
        if foreign:
            self.add_error("quotas", f"Not quotas of {tenant}: {', '.join(foreign)}")
        return data


@admin.register(Workspace)
class WorkspaceAdmin(TenantScopedAdmin):
    ordering = ["tenant__name", "name"]
    list_display = ["name", "tenant", "member_count", "created_at"]
    list_filter = ["tenant"]
    list_select_related = ["tenant"]
    search_fields = ["name", "tenant__name"]
    filter_horizontal = ["quotas"]
    inlines = [MembershipInline]
    owner_may = ("view", "change", "add")
    form = WorkspaceForm

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_members=Count("memberships"))

    def save_model(self, request, obj: Workspace, form, change: bool) -> None:
        if change:
            actions.update_workspace(obj, actor=request.user)
        else:  # its quotas are bound in save_related
            created = actions.create_workspace(obj.tenant, obj.name, actor=request.user)
            obj.pk, obj.created_at = created.pk, created.created_at

    def delete_model(self, request, obj: Workspace) -> None:
        actions.delete_workspace(obj, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for workspace in queryset:
            actions.delete_workspace(workspace, actor=request.user)

    def save_related(self, request, form, formsets, change: bool) -> None:
        actions.bind_quotas(form.instance, form.cleaned_data["quotas"], actor=request.user)
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def save_formset(self, request, form, formset, change: bool) -> None:
        """The members inline: each added, changed or removed member through the actions
        (`formset.save(commit=False)` only sorts them, for the admin's history message)."""
        workspace, actor = form.instance, request.user
        formset.save(commit=False)
        for membership in formset.deleted_objects:
            actions.remove_member(membership, actor=actor)
        for membership, fields in formset.changed_objects:
            if "user" in fields:  # another person in this row: one leaves, one joins
                actions.remove_member(Membership.objects.get(pk=membership.pk), actor=actor)
                membership.pk = actions.add_member(
                    workspace, membership.user, membership.role, actor=actor
                ).pk
            else:
                actions.change_role(membership, membership.role, actor=actor)
        for membership in formset.new_objects:
            membership.pk = actions.add_member(
                workspace, membership.user, membership.role, actor=actor
            ).pk

    @admin.display(description="Members", ordering="_members")
    def member_count(self, obj: Workspace) -> int:
        return obj._members


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
    ordering = ["name"]
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
