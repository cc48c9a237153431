"""The dashboard (home after login) and the Quotas page: usage at a glance.

Both read the scheduler's own snapshot once (`jobs.forecast.current_snapshot`, i.e.
`jobs.scheduler.cycle.load_snapshot`) and turn it into numbers with `policy.accounting`, so
what they show is what the scheduler plans with. Query counts are constant: the snapshot's
reads plus a handful of bounded queries, whatever the number of jobs.
"""

from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Q, Window
from django.db.models.functions import RowNumber
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from jobs.access import member_workspace_ids
from jobs.forecast import cached_expected_starts, current_snapshot
from jobs.models import Job, JobEvent, Pod, RestartRecord
from policy.accounting import Accounting, QuotaUsage, account, tree_order
from policy.statuses import ACTIVE_JOB_STATUSES, WAITING_JOB_STATUSES, JobStatus, PodStatus
from quotas.access import owned_tenant_ids, visible_quota_ids, workspace_quotas
from quotas.models import Tenant
from web.charts import idle_holders

RECENT = 10
WAITING_SHOWN = 10  # per quota on the Quotas page


def _usage_rows(acc: Accounting, quota_ids: set[int]) -> list[QuotaUsage]:
    """The quotas in tree order, parents first (by name for flat quotas)."""
    return tree_order(u for qid, u in acc.quotas.items() if qid in quota_ids)


def _recent_trouble(user) -> list[dict]:
    """The newest failures, preemptions and restarts of the user's workspaces, with reasons
    (two queries)."""
    workspaces = member_workspace_ids(user)
    events = (
        JobEvent.objects.filter(
            job__workspace_id__in=workspaces,
            to_status__in=[JobStatus.FAILED, JobStatus.PREEMPTED],
        )
        .select_related("job")
        .order_by("-created_at", "-id")[:RECENT]
    )
    restarts = (
        RestartRecord.objects.filter(job__workspace_id__in=workspaces)
        .select_related("job")
        .order_by("-created_at", "-id")[:RECENT]
    )
    items = [
        {"at": e.created_at, "job": e.job, "what": e.to_status, "reason": e.reason} for e in events
    ] + [
        {
            "at": r.created_at,
            "job": r.job,
            "what": f"Restart ({r.get_kind_display().lower()})",
            "reason": r.reason,
        }
        for r in restarts
    ]
    return sorted(items, key=lambda item: item["at"], reverse=True)[:RECENT]


@login_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    user = request.user
    now = timezone.now()
    acc = account(current_snapshot())
    mine = dict(
        Job.objects.filter(owner=user, status__in=list(ACTIVE_JOB_STATUSES))
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    quota_ids = set(workspace_quotas(user).values_list("pk", flat=True))
    my_running = Pod.objects.filter(job__owner=user, status=PodStatus.RUNNING)
    context = {
        "my_jobs": [(s.value, mine.get(s.value, 0)) for s in JobStatus if s in ACTIVE_JOB_STATUSES],
        "my_active_total": sum(mine.values()),
        "quotas": _usage_rows(acc, quota_ids),
        "pools": acc.pools,
        "trouble": _recent_trouble(user),
        "idle": idle_holders(my_running, now),
        "now": now,
    }
    return render(request, "web/overview/dashboard.html", context)


def _waiting_jobs(quota_ids: set[int]) -> dict[int, list[Job]]:
    """The first WAITING_SHOWN jobs of each quota's queue, in queue order (one query)."""
    ranked = (
        Job.objects.filter(status__in=WAITING_JOB_STATUSES, quota_id__in=quota_ids)
        .annotate(
            place=Window(
                RowNumber(),
                partition_by=[F("quota_id")],
                order_by=[
                    F("queue_position").asc(nulls_last=True),
                    F("priority").desc(),
                    F("created_at").asc(),
                    F("id").asc(),
                ],
            )
        )
        .filter(place__lte=WAITING_SHOWN)
        .select_related("owner", "workspace")
        .order_by("quota_id", "place")
    )
    queues: dict[int, list[Job]] = {}
    for job in ranked:
        queues.setdefault(job.quota_id, []).append(job)
    return queues


@login_required
@require_GET
def quotas_page(request: HttpRequest) -> HttpResponse:
    """Read-only for everyone: researchers see their workspaces' quotas; quota owners see
    every quota of their tenants, with who borrows from whom and which held GPUs idle."""
    user = request.user
    now = timezone.now()
    owned = owned_tenant_ids(user)
    quota_ids = visible_quota_ids(user, owned)
    snapshot = current_snapshot()
    acc = account(snapshot)
    rows = _usage_rows(acc, quota_ids)
    names = {qid: u.name for qid, u in acc.quotas.items()}
    my_workspaces = set(member_workspace_ids(user).values_list("workspace_id", flat=True))
    queues = _waiting_jobs(quota_ids)
    if queues:
        shown = {job.pk for jobs in queues.values() for job in jobs}
        estimates = cached_expected_starts(shown, snapshot)
        for jobs in queues.values():
            for job in jobs:
                job.expected_start = estimates.get(job.pk)
    borrows = [b for b in acc.borrows if b.borrower_id in quota_ids or b.lender_id in quota_ids]
    # Whose borrowing jobs these are (one query): a job of a workspace the user is not in is
    # shown by number only, unless the user owns the tenant.
    borrowers = {
        job.pk: job
        for job in Job.objects.filter(pk__in=[b.job_id for b in borrows]).select_related(
            "owner", "workspace"
        )
    }
    tenants = {t.pk: t.name for t in Tenant.objects.filter(pk__in={u.tenant_id for u in rows})}

    def shown(job: Job | None) -> bool:
        return job is not None and (
            job.workspace_id in my_workspaces or job.workspace.tenant_id in owned
        )

    running_here = Pod.objects.filter(
        Q(job__workspace_id__in=my_workspaces) | Q(job__workspace__tenant_id__in=owned),
        status=PodStatus.RUNNING,
        charged_quota_id__in=quota_ids,
    )
    visible_tenants = {u.tenant_id for u in rows}
    context = {
        "owner": bool(owned),
        "quotas": rows,
        "tree": [u for u in rows if u.in_tree],
        "starved": [u for u in rows if u.starved],
        "queues": [
            (u, [(job, shown(job)) for job in queues.get(u.id, [])]) for u in rows if u.waiting
        ],
        "borrows": [
            {
                "borrow": b,
                "job": borrowers.get(b.job_id),
                "shown": shown(borrowers.get(b.job_id)),
                "borrower": names.get(b.borrower_id, f"#{b.borrower_id}"),
                "lender": names.get(b.lender_id, f"#{b.lender_id}"),
            }
            for b in borrows
        ],
        "pooled": [
            (tenants.get(p.tenant_id, ""), p)
            for p in acc.pooled_idle
            if p.tenant_id in visible_tenants
        ],
        "idle": idle_holders(running_here, now),
        "now": now,
        # The owner pages of each tenant shown (read-only for researchers).
        "tenant_links": [{"id": pk, "name": name} for pk, name in sorted(tenants.items())],
    }
    return render(request, "web/overview/quotas.html", context)
