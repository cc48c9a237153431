"""Admin for quota owners: tenants and workspaces with members. (Quotas, shown with their
live usage, are registered by jobs.admin: usage is counted from pods.)

Every write goes through `quotas.actions` (audited, and a scheduling cycle requested):
`save_model`, `delete_model`, `delete_queryset` and the inlines' `save_formset`.

`TenantScopedAdmin` lets quota owners (role quota owner or admin in a workspace of a
tenant, `quotas.access.owned_tenant_ids`) into a model's admin without being staff, limited
to the rows of their tenants; superusers and staff with Django permissions are unaffected.
"""

from django import forms
from django.contrib import admin
from django.db.models import Count
from django.http import HttpRequest

from quotas import actions
from quotas.access import owned_tenant_ids
from quotas.models import Membership, Quota, Tenant, Workspace


def owned_by(request: HttpRequest) -> set[int]:
    """The requesting user's tenants (computed once per request)."""
    if not hasattr(request, "_owned_tenants"):
        request._owned_tenants = (
            set() if request.user.is_superuser else owned_tenant_ids(request.user)
        )
    return request._owned_tenants


class TenantScopedAdmin(admin.ModelAdmin):
    """`tenant_lookup` leads from the model to its tenant's id (e.g. "workspace__tenant_id");
    `owner_may` lists what quota owners may do with their tenants' rows. An empty lookup
    means the model is not per tenant (nodes): owners see every row."""

    tenant_lookup = "tenant_id"
    owner_may: tuple[str, ...] = ("view",)

    def _tenant_of(self, obj) -> int | None:
        value = obj
        for part in self.tenant_lookup.split("__"):
            value = getattr(value, part, None)
        return value

    def _owner_may(self, request: HttpRequest, what: str, obj=None) -> bool:
        owned = owned_by(request)
        if not owned or what not in self.owner_may:
            return False
        return obj is None or not self.tenant_lookup or self._tenant_of(obj) in owned

    def _scoped(self, request: HttpRequest) -> bool:
        """Whether the user sees this model only as a quota owner (rows limited)."""
        return not request.user.is_superuser and not super().has_view_permission(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or self._owner_may(request, "view")

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return super().has_view_permission(request, obj) or self._owner_may(request, "view", obj)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return super().has_change_permission(request, obj) or self._owner_may(
            request, "change", obj
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) or self._owner_may(request, "add")

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return super().has_delete_permission(request, obj) or self._owner_may(
            request, "delete", obj
        )

    def get_queryset(self, request: HttpRequest):
        queryset = super().get_queryset(request)
        if self.tenant_lookup and self._scoped(request):
            return queryset.filter(**{f"{self.tenant_lookup}__in": owned_by(request)})
        return queryset

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # A quota owner picks only among their own tenants (and their workspaces).
        if self._scoped(request) and db_field.related_model is Tenant:
            kwargs["queryset"] = Tenant.objects.filter(pk__in=owned_by(request))
        if self._scoped(request) and db_field.related_model is Quota:  # a quota's parent
            kwargs["queryset"] = Quota.objects.filter(tenant_id__in=owned_by(request))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if self._scoped(request) and db_field.related_model is Quota:
            kwargs["queryset"] = Quota.objects.filter(tenant_id__in=owned_by(request))
        return super().formfield_for_manytomany(db_field, request, **kwargs)


def _model_fields(form: forms.ModelForm) -> dict:
    """The form's cleaned values of the model's own columns (not its many-to-many)."""
    names = {f.name for f in form._meta.model._meta.concrete_fields}
    return {name: value for name, value in form.cleaned_data.items() if name in names}


def _add_errors(form: forms.BaseForm, errors: dict[str, list[str]]) -> None:
    for name, messages in errors.items():
        form.add_error(name if name in form.fields else None, messages)


class QuotaForm(forms.ModelForm):
    """The model's validation, then the rules of `quotas.actions.QUOTA_RULES` as field
    errors (the action checks them again when it writes)."""

    class Meta:
        model = Quota
        fields = "__all__"  # noqa: DJ007 (the admin's fieldsets decide what is shown)

    def _post_clean(self) -> None:
        super()._post_clean()  # the instance now holds the submitted values
        if self.errors:
            return
        before = Quota.objects.filter(pk=self.instance.pk).first() if self.instance.pk else None
        _add_errors(self, actions.rule_refusals(self.instance, before))


class QuotaWritesAdmin(TenantScopedAdmin):
    """Quotas written through `quotas.actions` (`jobs.admin.QuotaAdmin` adds the usage)."""

    form = QuotaForm

    def save_model(self, request, obj: Quota, form, change: bool) -> None:
        if change:
            actions.update_quota(obj, actor=request.user)
        else:
            created = actions.create_quota(actor=request.user, **_model_fields(form))
            obj.pk, obj.created_at = created.pk, created.created_at

    def delete_model(self, request, obj: Quota) -> None:
        actions.delete_quota(obj, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for quota in queryset:
            actions.delete_quota(quota, actor=request.user)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
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


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    raw_id_fields = ["user"]

    # Quota owners manage the members of their tenants' workspaces.
    def has_view_permission(self, request, obj=None) -> bool:
        return super().has_view_permission(request, obj) or bool(owned_by(request))

    def has_change_permission(self, request, obj=None) -> bool:
        return super().has_change_permission(request, obj) or bool(owned_by(request))

    def has_add_permission(self, request, obj=None) -> bool:
        return super().has_add_permission(request, obj) or bool(owned_by(request))

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) or bool(owned_by(request))


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
