"""POST /api/v1/agent/register/: bootstrap tokens in every state, node creation, takeover."""

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connections
from django.test import Client
from django.utils import timezone

from accounts.tokens import digest_of
from agents.actions import issue_bootstrap_token
from agents.models import BootstrapToken, RegistrationOutcome, RegistrationRecord
from cluster.actions import revoke_node_tokens
from cluster.models import GpuDevice, Node, NodeState
from tests.agents.conftest import facts, heartbeat, post, run_together

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def body(name: str = "n1", **extra) -> dict:
    return {"name": name, "facts": facts(**extra)}


def test_valid_token_registers_the_node_with_its_facts_and_a_hashed_token(client):
    row, plain = issue_bootstrap_token(None, "rack 3")
    with time_machine.travel(T0, tick=False):
        response = post(client, "register/", body(), plain)
    assert response.status_code == 200, response.content
    data = response.json()
    node = Node.objects.get(pk=data["node_id"])
    assert (node.name, node.gpus, node.gpu_type, node.cpus, node.memory_gb) == (
        "n1",
        8,
        "H200",
        96,
        1024,
    )
    assert node.state == NodeState.READY
    assert node.last_heartbeat_at == T0
    assert node.heartbeat_deadline == T0 + timedelta(seconds=30)
    token = data["node_token"]
    assert token.startswith("gqn_")
    assert node.token_prefix == token.split("_")[1]
    assert node.token_digest == digest_of(token) and token not in node.token_digest
    assert GpuDevice.objects.filter(node=node).count() == 8
    row.refresh_from_db()
    assert row.used_at == T0
    assert data["heartbeat_interval"] == 5.0
    # The new token works for heartbeats at once.
    assert heartbeat(client, token).status_code == 200


def test_single_use_token_cannot_register_twice(client):
    _, plain = issue_bootstrap_token(None, "once")
    assert post(client, "register/", body("n1"), plain).status_code == 200
    response = post(client, "register/", body("n2"), plain)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token_used"
    assert not Node.objects.filter(name="n2").exists()


def test_reusable_token_registers_several_nodes(client):
    _, plain = issue_bootstrap_token(None, "fleet", single_use=False)
    assert post(client, "register/", body("n1"), plain).status_code == 200
    assert post(client, "register/", body("n2"), plain).status_code == 200
    assert Node.objects.count() == 2


def test_expired_token_is_refused(client):
    with time_machine.travel(T0, tick=False):
        _, plain = issue_bootstrap_token(None, "short", ttl=60)
    with time_machine.travel(T0 + timedelta(seconds=61), tick=False):
        response = post(client, "register/", body(), plain)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token_expired"
    assert not Node.objects.exists()


def test_revoked_token_is_refused(client):
    row, plain = issue_bootstrap_token(None, "revoked")
    BootstrapToken.objects.filter(pk=row.pk).update(revoked_at=timezone.now())
    response = post(client, "register/", body(), plain)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token_revoked"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Basic abc",
        "Bearer ",
        "Bearer garbage",
        "Bearer gqb_short_secret",
        "Bearer gqc_abcdef12_not-a-bootstrap-token",
    ],
)
def test_missing_or_malformed_token_is_401(client, header):
    issue_bootstrap_token(None, "unused")
    headers = {"Authorization": header} if header else {}
    response = client.post(
        "/api/v1/agent/register/", data=body(), content_type="application/json", headers=headers
    )
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] in {"missing_token", "malformed_token"}
    assert not Node.objects.exists()


def test_wrong_secret_with_a_real_prefix_is_401(client):
    row, _plain = issue_bootstrap_token(None, "x")
    forged = f"gqb_{row.prefix}_{'A' * 43}"
    response = post(client, "register/", body(), forged)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_token"
    row.refresh_from_db()
    assert row.used_at is None


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "../etc", "facts": facts()}, "name"),
        ({"name": "n1", "facts": facts(), "extra": 1}, "extra"),
        ({"name": "n1", "facts": facts(cpus=-1)}, "facts.cpus"),
        ({"name": "n1", "facts": facts(resource_type="Cloud")}, "facts.resource_type"),
        ({"name": "n1"}, "facts"),
    ],
)
def test_invalid_body_is_400_names_the_field_and_keeps_the_token(client, payload, field):
    row, plain = issue_bootstrap_token(None, "x")
    response = post(client, "register/", payload, plain)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["field"] == field
    row.refresh_from_db()
    assert row.used_at is None  # bad input loses nothing
    assert post(client, "register/", body(), plain).status_code == 200


def test_invalid_json_is_400(client):
    _, plain = issue_bootstrap_token(None, "x")
    response = post(client, "register/", b"{not json", plain)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_wrong_method_is_405_json(client):
    response = client.get("/api/v1/agent/register/")
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_unknown_endpoint_is_404_json(client):
    response = client.post("/api/v1/agent/nope/", data="{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_missing_trailing_slash_gets_a_hint(client):
    response = client.post("/api/v1/agent/heartbeat", data="{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json()["error"]["message"].endswith("did you mean heartbeat/ ?")


def test_register_needs_no_csrf_token():
    _, plain = issue_bootstrap_token(None, "x")
    strict = Client(enforce_csrf_checks=True)
    assert post(strict, "register/", body(), plain).status_code == 200


def test_a_registered_name_is_not_taken_over_until_an_admin_allows_it(client, admin_user):
    _, first = issue_bootstrap_token(None, "a", single_use=False)
    old = post(client, "register/", body("n1"), first).json()
    Node.objects.filter(name="n1").update(state=NodeState.LOST)

    # Whoever holds a bootstrap token (here the same reusable one) cannot take the name.
    refused = post(client, "register/", body("n1", gpus=4), first, REMOTE_ADDR="10.9.9.9")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "name_taken"
    node = Node.objects.get(name="n1")
    assert (node.state, node.gpus) == (NodeState.LOST, 8)
    assert heartbeat(client, old["node_token"]).status_code == 200  # the real agent still is
    attempt = RegistrationRecord.objects.get(outcome=RegistrationOutcome.REFUSED)
    assert (attempt.name, attempt.node, attempt.remote_addr) == ("n1", node, "10.9.9.9")

    # An operator allows it (admin action, recorded); the next registration takes the name.
    admin = Client()
    admin.force_login(admin_user)
    response = admin.post(
        "/admin/cluster/node/",
        {"action": "allow_reregistration", "_selected_action": [node.pk]},
    )
    assert response.status_code == 302
    allowed = RegistrationRecord.objects.get(outcome=RegistrationOutcome.ALLOWED)
    assert (allowed.node, allowed.user) == (node, admin_user)
    _, second = issue_bootstrap_token(None, "b")
    new = post(client, "register/", body("n1", gpus=4), second).json()
    assert new["node_id"] == old["node_id"]
    node.refresh_from_db()
    assert (node.state, node.gpus, node.reregistration_allowed_at) == (NodeState.READY, 4, None)
    assert heartbeat(client, old["node_token"], gpus=4).status_code == 401
    assert heartbeat(client, new["node_token"], gpus=4).status_code == 200
    # The consent was for one registration only.
    assert post(client, "register/", body("n1"), first).status_code == 409
    outcomes = list(RegistrationRecord.objects.order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["registered", "refused", "allowed", "re-registered", "refused"]


def test_a_revoked_node_token_lets_its_name_register_again(client):
    _, token = issue_bootstrap_token(None, "a", single_use=False)
    post(client, "register/", body("n1"), token)
    revoke_node_tokens(Node.objects.filter(name="n1"), timezone.now())
    assert post(client, "register/", body("n1"), token).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_two_agents_racing_for_one_single_use_token_exactly_one_wins():
    _, plain = issue_bootstrap_token(None, "race")

    def attempt(name):
        def call():
            return post(Client(), "register/", body(name), plain).status_code

        return call

    results = run_together(attempt("a"), attempt("b"), attempt("c"))
    connections.close_all()
    codes = sorted(value for kind, value in results if kind == "ok")
    assert codes == [200, 403, 403], results
    assert Node.objects.count() == 1


# --- a registration repeated after a lost reply (docs/agent-protocol.md) ----------------
KEY = "k" * 43


def test_a_registration_repeated_after_a_lost_reply_gets_its_node_and_token_again(client):
    _, single = issue_bootstrap_token(None, "a")  # single-use: the repeat must not need it
    lost = post(client, "register/", body("n1") | {"registration_key": KEY}, single).json()
    again = post(client, "register/", body("n1") | {"registration_key": KEY}, single)
    assert again.status_code == 200, again.content
    # The same node and the same token: a copy of the request that arrives late, behind
    # the retry the agent got its answer from, cannot make the agent's token useless.
    assert again.json() == lost
    assert Node.objects.count() == 1
    assert heartbeat(client, again.json()["node_token"]).status_code == 200
    # Another key (another registration, once allowed) gets another token.
    Node.objects.filter(name="n1").update(reregistration_allowed_at=timezone.now())
    _, other = issue_bootstrap_token(None, "b")
    third = post(client, "register/", body("n1") | {"registration_key": "z" * 43}, other).json()
    assert third["node_token"] != lost["node_token"]
    assert heartbeat(client, lost["node_token"]).status_code == 401
    records = RegistrationRecord.objects.order_by("id").values_list("outcome", "detail")
    assert [r[0] for r in records] == ["registered", "re-registered", "re-registered"]
    assert "reply to its last registration was lost" in records[1][1]


@pytest.mark.parametrize(
    "second",
    [
        {},  # an agent without a key (an older one, or another holder of the token)
        {"registration_key": "x" * 43},  # another key: another agent
    ],
)
def test_a_registration_without_the_same_key_does_not_take_the_name(client, second):
    _, reusable = issue_bootstrap_token(None, "a", single_use=False)
    first = post(client, "register/", body("n1") | {"registration_key": KEY}, reusable).json()
    refused = post(client, "register/", body("n1") | second, reusable)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "name_taken"
    assert heartbeat(client, first["node_token"]).status_code == 200


def test_the_same_key_from_another_token_late_or_revoked_does_not_take_the_name(client):
    _, token = issue_bootstrap_token(None, "a", single_use=False)
    _, other = issue_bootstrap_token(None, "b", single_use=False)
    keyed = body("n1") | {"registration_key": KEY}
    with time_machine.travel(T0, tick=False):
        first = post(client, "register/", keyed, token).json()
        assert post(client, "register/", keyed, other).status_code == 409
    with time_machine.travel(T0 + timedelta(seconds=601), tick=False):
        late = post(client, "register/", keyed, token)
        assert late.status_code == 409
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False):
        BootstrapToken.objects.filter(note="a").update(revoked_at=T0 + timedelta(seconds=20))
        revoked = post(client, "register/", keyed, token)
        assert revoked.status_code == 403
    assert heartbeat(client, first["node_token"]).status_code == 200


@pytest.mark.parametrize(
    "key", ["short", "k" * 129, "not a key!" * 5, "\x00" * 43, "\ud800" * 43, 12345, "k" * 10**6]
)
def test_a_malformed_registration_key_is_400_naming_the_field(client, key):
    _, token = issue_bootstrap_token(None, "a")
    response = post(client, "register/", body("n1") | {"registration_key": key}, token)
    assert response.status_code == 400
    error = response.json()["error"]
    if "\ud800" in str(key):  # not even JSON a strict parser takes: the whole body is refused
        assert error["code"] == "invalid_json"
    else:
        assert "registration_key" in json.dumps(error)
    assert not Node.objects.exists()
    assert BootstrapToken.objects.get(note="a").used_at is None  # the token is not spent


@pytest.mark.django_db(transaction=True)
def test_copies_of_one_registration_at_once_all_get_its_node_and_token():
    """The overloaded console's case: copies of one registration (a timed-out attempt still
    running beside its retries) meet in the database; each copy waits for the one that
    inserts the node (and claims the single-use token), then repeats it."""
    _, single = issue_bootstrap_token(None, "copies")

    def copy():
        reply = post(Client(), "register/", body("n1") | {"registration_key": KEY}, single)
        return reply.status_code, reply.json().get("node_token")

    results = run_together(copy, copy, copy)
    connections.close_all()
    replies = [value for kind, value in results if kind == "ok"]
    assert [code for code, _ in replies] == [200, 200, 200], results
    assert len({token for _, token in replies}) == 1
    assert Node.objects.count() == 1
    outcomes = sorted(RegistrationRecord.objects.values_list("outcome", flat=True))
    assert outcomes == ["re-registered", "re-registered", "registered"]
