"""Revoking a node's token in the admin: its agent is refused (403) from the next request."""

import pytest

from cluster.models import Node
from tests.agents.conftest import heartbeat, register

pytestmark = pytest.mark.django_db


def test_an_admin_revokes_node_tokens_and_the_agent_is_refused(client, admin_client):
    node, token = register(client, "n1")
    other, other_token = register(client, "n2")
    assert heartbeat(client, token).status_code == 200
    response = admin_client.post(
        "/admin/cluster/node/",
        {"action": "revoke_tokens", "_selected_action": [node.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Revoked the token of 1 node(s)" in response.content.decode()
    refused = heartbeat(client, token)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "token_revoked"
    assert heartbeat(client, other_token).status_code == 200  # only the selected node
    assert Node.objects.get(pk=other.pk).token_revoked_at is None


def test_node_tokens_are_stored_hashed(client):
    node, token = register(client, "n1")
    node.refresh_from_db()
    assert token not in (node.token_digest, node.token_prefix)
    assert len(node.token_digest) == 64 and token.startswith(f"gqn_{node.token_prefix}")
