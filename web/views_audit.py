"""The audit log of a tenant for its owners, under /quotas/ (docs/quota-tree.md "Audit of
a tenant"): filtered (action, person, kind of object, dates), paged, and as CSV with the
same filters. Quota owners and admins of the tenant, and staff; the tenant's other members
get a 403, anyone else a 404 (`quotas.access.get_tenant_for_user`)."""

from datetime import datetime, time, timedelta

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from audit.export import csv_response
from audit.models import AuditEntry, Via
from audit.tenants import tenant_entries
from quotas.access import get_tenant_for_user

PER_PAGE = 50
KINDS = [("", "Any"), ("quota", "Quotas"), ("workspace", "Workspaces and members")]
KINDS += [("tenant", "The tenant"), ("job", "Jobs")]


class AuditFilters(forms.Form):
    action = forms.CharField(required=False, max_length=64, help_text="e.g. quota.change")
    actor = forms.CharField(required=False, max_length=150, label="Person")
    kind = forms.ChoiceField(required=False, choices=KINDS, label="Object")
    via = forms.ChoiceField(required=False, choices=[("", "Any"), *Via.choices])
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def apply(self, entries: QuerySet[AuditEntry]) -> QuerySet[AuditEntry]:
        data = self.cleaned_data if self.is_valid() else {}
        if data.get("action"):
            entries = entries.filter(action__startswith=data["action"])
        if data.get("actor"):
            entries = entries.filter(actor_name=data["actor"])
        if data.get("kind"):
            entries = entries.filter(object_type=data["kind"])
        if data.get("via"):
            entries = entries.filter(via=data["via"])
        zone = timezone.get_current_timezone()
        if data.get("since"):
            entries = entries.filter(at__gte=datetime.combine(data["since"], time(), zone))
        if data.get("until"):
            end = datetime.combine(data["until"] + timedelta(days=1), time(), zone)
            entries = entries.filter(at__lt=end)
        return entries.order_by("-at", "-id")


def _owned_entries(request: HttpRequest, tenant_id: int):
    tenant, can_write = get_tenant_for_user(request.user, tenant_id)
    if not can_write:
        raise PermissionDenied("Only the tenant's quota owners see its audit log.")
    filters = AuditFilters(request.GET)
    return tenant, filters, filters.apply(tenant_entries([tenant.pk]))


@login_required
@require_GET
def tenant_audit(request: HttpRequest, tenant_id: int) -> HttpResponse:
    tenant, filters, entries = _owned_entries(request, tenant_id)
    page = Paginator(entries, PER_PAGE).get_page(request.GET.get("page"))
    for entry in page:
        detail = entry.detail if isinstance(entry.detail, dict) else {}
        entry.summary = detail.get("message") or detail.get("reason") or ""
    query = request.GET.copy()
    query.pop("page", None)
    context = {"tenant": tenant, "filters": filters, "page": page, "query": query.urlencode()}
    return render(request, "web/owners/audit.html", context)


@login_required
@require_GET
def tenant_audit_csv(request: HttpRequest, tenant_id: int) -> HttpResponse:
    tenant, _, entries = _owned_entries(request, tenant_id)
    name = f"audit-{tenant.name}-{timezone.now():%Y%m%d-%H%M%S}.csv"
    return csv_response(entries.iterator(2000), name)
