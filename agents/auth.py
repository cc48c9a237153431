"""Authentication of agent requests: bootstrap tokens for registering, node tokens after.

Both are prefixed secrets stored as a lookup prefix plus a digest (accounts.tokens): an
admin hands a bootstrap token (`gqb_…`) to a new node, whose agent presents it once to
`POST /api/v1/agent/register/` and receives its own node token (`gqn_…`).

401 means "we do not know this credential" (missing, malformed, unknown, wrong secret);
403 means "we know it, but it may no longer be used" (expired, revoked, already used).
"""

from dataclasses import dataclass

from django.db import connection
from django.http import HttpRequest

from accounts.tokens import matches, split_prefix
from cluster.models import Node

BOOTSTRAP_KIND = "gqb"
NODE_KIND = "gqn"


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
    return authenticate_token(bearer_token(request))


def authenticate_token(plain: str) -> Node:
    """The node whose live token this is (one query); AgentApiError otherwise."""
    prefix = split_prefix(plain, NODE_KIND)
    if prefix is None:
        raise AgentApiError(401, "malformed_token", "not a node token")
    node = _node_with_prefix(prefix)
    if node is None or not node.token_digest or not matches(plain, node.token_digest):
        raise AgentApiError(401, "invalid_token", "unknown node token")
    if node.token_revoked_at is not None:
        raise AgentApiError(
            403, "token_revoked", "this node's token was revoked; register it again"
        )
    return node


def _node_with_prefix(prefix: str) -> Node | None:
    """The node whose token has this (unique) prefix. A raw query: compiling the ORM's
    cost half of the CPU of this lookup, which every full heartbeat and log request makes
    (446 µs with `.filter().first()`, 223 µs so)."""
    qn = connection.ops.quote_name
    table, column = qn(Node._meta.db_table), qn(Node._meta.get_field("token_prefix").column)
    rows = Node.objects.raw(f"SELECT * FROM {table} WHERE {column} = %s", [prefix])  # noqa: S608
    return next(iter(rows), None)
