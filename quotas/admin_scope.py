"""Who sees which rows in the admin: `TenantScopedAdmin` lets quota owners (role quota owner
or admin in a workspace of a tenant, `quotas.access.owned_tenant_ids`) into a model's admin
without being staff, limited to the rows of their tenants and to what the "Quota owners"
group's permissions grant; superusers and staff with Django permissions are unaffected.
The base of every tenant-scoped admin (quotas, workspaces, jobs, nodes, audit entries),
kept out of `quotas.admin` so that the admins of the rooms above import it and no admin
module imports another."""

from django.contrib import admin
from django.http import HttpRequest

from quotas.access import owned_tenant_ids
from quotas.models import Quota, Tenant


def owned_by(request: HttpRequest) -> set[int]:
    """The requesting user's tenants (computed once per request)."""
    if not hasattr(request, "_owned_tenants"):
        request._owned_tenants = (
            set() if request.user.is_superuser else owned_tenant_ids(request.user)
        )
    return request._owned_tenants


def owner_may_model(request: HttpRequest, model, what: str) -> bool:
    """Whether quota owners may `what` ("view", "add", "change", "delete") `model`: the
    "Quota owners" group holds that permission (the admin site reads the group's
    permissions into the request, `console.admin_site`), and the user owns a tenant."""
    perms = getattr(request, "quota_owner_perms", None) or set()
    opts = model._meta
    return bool(owned_by(request)) and f"{opts.app_label}.{what}_{opts.model_name}" in perms


class TenantScopedAdmin(admin.ModelAdmin):
    """`tenant_lookup` leads from the model to its tenant's id (e.g. "workspace__tenant_id");
    `owner_may` lists what quota owners may ever do with their tenants' rows (of which the
    "Quota owners" group's permissions grant some: `owner_may_model`). An empty lookup
    means the model is not per tenant (nodes): owners see every row."""

    tenant_lookup = "tenant_id"
    owner_may: tuple[str, ...] = ("view",)

    def _tenant_of(self, obj) -> int | None:
        value = obj
        for part in self.tenant_lookup.split("__"):
            value = getattr(value, part, None)
        return value

    def _owner_may(self, request: HttpRequest, what: str, obj=None) -> bool:
        if what not in self.owner_may or not owner_may_model(request, self.model, what):
            return False
        return obj is None or not self.tenant_lookup or self._tenant_of(obj) in owned_by(request)

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

    def get_ordering(self, request: HttpRequest):
        # A stable order for every list and autocomplete (pages never repeat or skip rows).
        return super().get_ordering(request) or ["-pk"]

    def get_list_filter(self, request: HttpRequest):
        """A filter by a related object offers, to a quota owner, only the objects of the
        rows they see (another tenant's name is never a choice)."""
        found = super().get_list_filter(request)
        if not self._scoped(request):
            return found
        return [
            (entry, admin.RelatedOnlyFieldListFilter) if self._is_relation(entry) else entry
            for entry in found
        ]

    def _is_relation(self, entry) -> bool:
        if not isinstance(entry, str) or "__" in entry:
            return False
        field = next((f for f in self.model._meta.fields if f.name == entry), None)
        return field is not None and field.is_relation

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
