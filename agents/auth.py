"""Authentication of agent requests: bootstrap tokens for registering, node tokens after.

401 means "we do not know this credential" (missing, malformed, unknown, wrong secret);
403 means "we know it, but it may no longer be used" (expired, revoked, already used).
"""

from dataclasses import dataclass
from datetime import datetime

from django.http import HttpRequest

from accounts.tokens import matches, split_prefix
from agents.models import BootstrapToken
from agents.tokens import BOOTSTRAP_KIND, NODE_KIND
from cluster.models import Node


@dataclass
class AgentApiError(Exception):
    status: int
    code: str
    message: str
    field: str | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


def bearer_token(request: HttpRequest) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise AgentApiError(
            401, "missing_token", "send the token as 'Authorization: Bearer <token>'"
        )
    return value.strip()


def authenticate_node(request: HttpRequest) -> Node:
    plain = bearer_token(request)
    prefix = split_prefix(plain, NODE_KIND)
    if prefix is None:
        raise AgentApiError(401, "malformed_token", "not a node token")
    node = Node.objects.filter(token_prefix=prefix).first()
    if node is None or not node.token_digest or not matches(plain, node.token_digest):
        raise AgentApiError(401, "invalid_token", "unknown node token")
    if node.token_revoked_at is not None:
        raise AgentApiError(
            403, "token_revoked", "this node's token was revoked; register it again"
        )
    return node


def claim_bootstrap_token(plain: str, now: datetime) -> BootstrapToken:
    """Check a bootstrap token and, if it is single-use, mark it used.

    The claim is a compare-and-set, `UPDATE … SET used_at=now WHERE id=… AND used_at IS NULL
    AND revoked_at IS NULL AND expires_at > now`: of two agents racing with one single-use
    token exactly one UPDATE matches a row. Call it inside the registration transaction so
    a registration that fails afterwards leaves the token unused.
    """
    prefix = split_prefix(plain, BOOTSTRAP_KIND)
    if prefix is None:
        raise AgentApiError(401, "malformed_token", "not a bootstrap token")
    token = BootstrapToken.objects.filter(prefix=prefix).first()
    if token is None or not matches(plain, token.digest):
        raise AgentApiError(401, "invalid_token", "unknown bootstrap token")
    usable = BootstrapToken.objects.filter(pk=token.pk, revoked_at__isnull=True, expires_at__gt=now)
    if token.single_use:
        claimed = usable.filter(used_at__isnull=True).update(used_at=now)
    else:
        # Reusable tokens record their first use only; the update still checks validity.
        claimed = usable.update(used_at=token.used_at or now)
    if claimed:
        return token
    token.refresh_from_db()
    if token.revoked_at is not None:
        raise AgentApiError(403, "token_revoked", "this bootstrap token was revoked")
    if token.expires_at <= now:
        raise AgentApiError(403, "token_expired", "this bootstrap token has expired")
    raise AgentApiError(403, "token_used", "this single-use bootstrap token was already used")
