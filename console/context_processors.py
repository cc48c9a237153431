"""Template context every page needs: what the signed-in user may do (the navigation), and
the nodes' trouble (the console-wide banner)."""

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject


def roles(request: HttpRequest) -> dict:
    """`console_roles.quota_owner`: evaluated (one query) only when a template asks."""

    def load() -> dict:
        from quotas.access import is_quota_owner

        user = getattr(request, "user", None)
        return {"quota_owner": bool(user and user.is_authenticated and is_quota_owner(user))}

    return {"console_roles": SimpleLazyObject(load)}


def node_text(total: int, ready: int, not_ready: int, first_not_ready: str | None) -> str:
    """The console-wide banner's words about the nodes, or "" when all is well (pure)."""
    if total == 0:
        return "No node is registered: jobs wait until an agent registers one."
    if not_ready == 1:
        return (
            f"Node {first_not_ready} is NotReady: its agent has stopped reporting; "
            "its jobs' state is unknown until it reports again."
        )
    if not_ready > 1:
        return (
            f"{not_ready} nodes are NotReady ({first_not_ready}, …): their agents have "
            "stopped reporting."
        )
    if ready == 0:
        return "No node is ready: every registered node is lost; jobs wait until one returns."
    return ""


def node_banner(request: HttpRequest) -> dict:
    """`node_banner`: the nodes' trouble for every signed-in page (docs/processes.md, "The
    embedded agent"); one query, only when a template shows it, once per request."""

    def load() -> str:
        user = getattr(request, "user", None)
        if not (user and user.is_authenticated):
            return ""
        cached = getattr(request, "_node_banner", None)
        if cached is None:
            from django.db.models import Count, Min, Q

            from cluster.models import Node, NodeState

            counts = Node.objects.aggregate(
                total=Count("pk"),
                ready=Count("pk", filter=Q(state=NodeState.READY)),
                not_ready=Count("pk", filter=Q(state=NodeState.NOT_READY)),
                first=Min("name", filter=Q(state=NodeState.NOT_READY)),
            )
            cached = node_text(
                counts["total"], counts["ready"], counts["not_ready"], counts["first"]
            )
            request._node_banner = cached
        return cached

    return {"node_banner": SimpleLazyObject(load)}
