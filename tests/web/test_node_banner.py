"""The console-wide banner about the nodes (console.context_processors.node_banner): every
signed-in page says when no node is registered or a node is NotReady, with one query per
request, and says nothing when all nodes are Ready. docs/processes.md ("The embedded
agent")."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cluster.models import NodeState
from console.context_processors import node_text
from tests.conftest import make_node

PAGES = ["home", "web:list", "quotas", "usage", "notifications"]


@pytest.mark.parametrize(
    ("counts", "words"),
    [
        ((0, 0, 0, None), "No node is registered"),
        ((2, 1, 1, "gpu-7"), "Node gpu-7 is NotReady"),
        ((3, 0, 3, "a"), "3 nodes are NotReady (a, …)"),
        ((2, 0, 0, None), "No node is ready"),  # every one Lost
        ((2, 2, 0, None), ""),
    ],
)
def test_the_banner_words(counts, words):
    text = node_text(*counts)
    assert text.startswith(words) if words else text == ""


def _banner(client: Client, page: str = "home") -> str:
    html = client.get(reverse(page)).text
    if 'id="node-banner"' not in html:
        return ""
    return html.split('id="node-banner">', 1)[1].split("</p>", 1)[0]


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_no_node_registered_is_said_on_every_page(member_client, page):
    assert _banner(member_client, page).startswith("No node is registered")


@pytest.mark.django_db
def test_a_not_ready_node_is_named_and_a_ready_one_hides_the_banner(member_client):
    node = make_node("gpu-7")
    assert _banner(member_client) == ""
    node.state = NodeState.NOT_READY
    node.save(update_fields=["state"])
    assert _banner(member_client).startswith("Node gpu-7 is NotReady")
    node.state = NodeState.READY
    node.save(update_fields=["state"])
    assert _banner(member_client) == ""


@pytest.mark.django_db
def test_signed_out_pages_have_no_banner_and_no_query():
    with CaptureQueriesContext(connection) as queries:
        html = Client().get(reverse("login")).text
    assert 'id="node-banner"' not in html
    assert not [q for q in queries if "cluster_node" in q["sql"]]


@pytest.mark.django_db
def test_the_banner_is_one_query_per_request(member_client):
    make_node("gpu-7", state=NodeState.NOT_READY)
    with CaptureQueriesContext(connection) as queries:
        assert member_client.get(reverse("home")).status_code == 200
    assert (
        len([q for q in queries if 'FROM "cluster_node"' in q["sql"] and "COUNT" in q["sql"]]) == 1
    )
