"""Which audit entries belong to a tenant (docs/quota-tree.md "Audit of a tenant"): the
tenant's own changes, those of its quotas (a deleted quota's too: its entries name its
tenant), workspaces and members (a deleted workspace's too: its creation names its
tenant), and people's actions on its jobs. The owners' audit page
and the admin's audit list for quota owners share it."""

from collections.abc import Iterable

from django.db.models import CharField, Q, QuerySet
from django.db.models.functions import Cast

from audit.models import AuditEntry
from jobs.models import Job
from quotas.models import Quota, Workspace


def _ids(queryset: QuerySet) -> QuerySet:
    """The rows' ids as text (the audit log's `object_id`), for an IN subquery."""
    return queryset.annotate(text_id=Cast("pk", CharField())).values("text_id")


def tenant_filter(tenant_ids: Iterable[int]) -> Q:
    ids = sorted(set(tenant_ids))
    found = (
        Q(object_type="tenant", object_id__in=[str(pk) for pk in ids])
        | Q(object_type="quota", object_id__in=_ids(Quota.objects.filter(tenant_id__in=ids)))
        | Q(
            object_type="workspace",
            object_id__in=_ids(Workspace.objects.filter(tenant_id__in=ids)),
        )
        | Q(object_type="job", object_id__in=_ids(Job.objects.filter(workspace__tenant_id__in=ids)))
    )
    for pk in ids:  # a deleted quota: its creation and deletion name the tenant it had
        found |= Q(object_type="quota", detail__changes__tenant__0=pk)
        found |= Q(object_type="quota", detail__changes__tenant__1=pk)
        # A deleted workspace: every entry of it (its members' too), by the id its
        # creation filed with the tenant.
        created = AuditEntry.objects.filter(
            object_type="workspace", action="workspace.add", detail__changes__tenant__1=pk
        ).values("object_id")
        found |= Q(object_type="workspace", object_id__in=created)
    return found


def tenant_entries(tenant_ids: Iterable[int]) -> QuerySet[AuditEntry]:
    return AuditEntry.objects.filter(tenant_filter(tenant_ids))
