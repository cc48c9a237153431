"""Quotas (usage and queue) and nodes, read-only, as researchers see them; and who am I."""

from django.db.models import IntegerField, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from ninja import Router

from accounts.api_auth import ApiError
from api import schemas
from api.jobs import READ_ERRORS, is_admin
from api.parsing import bad_text
from api.serializers import node_json
from api.usage import my_positions, usage_json, waiting_gpus, waiting_jobs
from cluster.models import Node
from jobs.access import member_workspace_ids
from jobs.forecast import current_snapshot
from policy.accounting import account
from policy.statuses import ACTIVE_POD_STATUSES
from quotas.models import Quota, Workspace

router = Router()


def my_quotas(user):
    """Quotas bound to the user's workspaces, with their tenant and workspaces."""
    return (
        Quota.objects.filter(workspaces__in=member_workspace_ids(user))
        .distinct()
        .select_related("tenant", "parent")
        .prefetch_related("workspaces")
        .order_by("name")
    )


def _clean_ref(ref: str, what: str) -> str:
    if bad_text(ref) or len(ref) > 200:
        raise ApiError(404, "not_found", f"No {what} by that name.")
    return ref


def _quota_or_404(user, ref: str) -> Quota:
    ref = _clean_ref(ref, "quota")
    quotas = my_quotas(user)
    found = (
        quotas.filter(pk=int(ref)).first()
        if ref.isascii() and ref.isdigit() and len(ref) < 19
        else None
    )
    found = found or quotas.filter(name=ref).first()
    if found is None:
        raise ApiError(404, "not_found", f"No quota {ref[:100]!r} in your workspaces.")
    return found


def _quota_json(quota: Quota, usage: dict, queue: tuple[int, int], positions: list[int]) -> dict:
    return {
        "id": quota.pk,
        "name": quota.name,
        "tenant": quota.tenant.name,
        "resource_type": quota.resource_type,
        "gpu_type": quota.gpu_type,
        "preemption": quota.preemption,
        # The tree (docs/quota-tree.md): the parent's name, the guarantee left to this quota
        # once its children carved theirs out, and its limits and weight.
        "parent": quota.parent.name if quota.parent_id else None,
        "own_gpus": usage["own"],
        "max_gpus": quota.max_gpus,
        "lending_limit": quota.lending_limit,
        "weight": quota.weight,
        "workspaces": sorted(w.name for w in quota.workspaces.all()),
        "usage": usage,
        "queue": {"waiting": queue[0], "waiting_gpus": queue[1], "mine": positions},
    }


@router.get(
    "/quotas",
    response={200: schemas.QuotaList, **READ_ERRORS},
    url_name="quotas",
    summary="Your quotas: size, used, lent, borrowed, and the queue",
)
def list_quotas(request: HttpRequest):
    quotas = list(my_quotas(request.user))
    return {"quotas": _quotas_json(quotas, request.user)}


def _quotas_json(quotas: list[Quota], user) -> list[dict]:
    """The quotas with the scheduler's own usage numbers (one snapshot for all)."""
    ids = [q.pk for q in quotas]
    usage = account(current_snapshot()).quotas if quotas else {}
    queues = waiting_gpus(ids)
    positions = my_positions(ids, user)
    return [
        _quota_json(
            q,
            usage_json(usage.get(q.pk), q.gpus),
            queues.get(q.pk, (0, 0)),
            positions.get(q.pk, []),
        )
        for q in quotas
    ]


@router.get(
    "/quotas/{ref}",
    response={200: schemas.Quota, **READ_ERRORS},
    url_name="quota",
    summary="One quota, by name or id",
)
def get_quota(request: HttpRequest, ref: str):
    quota = _quota_or_404(request.user, ref)
    return _quotas_json([quota], request.user)[0]


@router.get(
    "/quotas/{ref}/queue",
    response={200: schemas.Queue, **READ_ERRORS},
    url_name="quota-queue",
    summary="The quota's waiting jobs in admission order",
)
def quota_queue(request: HttpRequest, ref: str):
    """Jobs of other workspaces sharing the quota are listed without their id, name and
    owner (you see where you stand, not what others run)."""
    quota = _quota_or_404(request.user, ref)
    mine = set(member_workspace_ids(request.user).values_list("workspace_id", flat=True))
    entries = []
    for job in waiting_jobs(quota.pk)[:1000]:
        visible = job.workspace_id in mine
        entries.append(
            {
                "position": job.queue_position,
                "job": job.pk if visible else None,
                "name": job.name if visible else None,
                "owner": job.owner.get_username() if visible else None,
                "workspace": job.workspace.name if visible else "(another workspace)",
                "status": job.status,
                "priority": job.priority,
                "gpus": job.total_gpus,
                "submitted_at": job.created_at.isoformat() if job.created_at else None,
                "reason": job.status_reason if visible else "",
                "mine": job.owner_id == request.user.pk,
            }
        )
    return {"quota": quota.name, "jobs": entries}


def _nodes():
    active = [s.value for s in ACTIVE_POD_STATUSES]
    return Node.objects.order_by("name").annotate(
        used=Coalesce(
            Sum("pods__gpus", filter=Q(pods__status__in=active)),
            Value(0),
            output_field=IntegerField(),
        )
    )


@router.get(
    "/nodes",
    response={200: schemas.NodeList, **READ_ERRORS},
    url_name="nodes",
    summary="The cluster's nodes and their GPU use",
)
def list_nodes(request: HttpRequest):
    return {"nodes": [node_json(node) for node in _nodes()]}


@router.get(
    "/nodes/{name}",
    response={200: schemas.Node, **READ_ERRORS},
    url_name="node",
    summary="One node",
)
def get_node(request: HttpRequest, name: str):
    node = _nodes().filter(name=_clean_ref(name, "node")).first()
    if node is None:
        raise ApiError(404, "not_found", f"No node {name[:100]!r}.")
    return node_json(node)


@router.get(
    "/me",
    response={200: schemas.Me, **READ_ERRORS},
    url_name="me",
    summary="Who the token belongs to",
)
def me(request: HttpRequest):
    user = request.user
    verdict = getattr(request, "rate_verdict", None)
    return {
        "username": user.get_username(),
        "is_admin": is_admin(user),
        "workspaces": sorted(
            Workspace.objects.filter(memberships__user=user).values_list("name", flat=True)
        ),
        "quotas": [q.name for q in my_quotas(user)],
        "rate_limit": str(verdict.limit) if verdict else "",
    }
