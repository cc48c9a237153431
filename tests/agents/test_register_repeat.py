"""A real agent whose registration reply is lost (a timeout after the console committed)
repeats it with the same key and gets the node it made (docs/agent-protocol.md, "A
registration repeated"); without the key the repeat was refused 409 and the node stayed
locked out until an operator let it register again (seen at 1,000 nodes, bench/fleet.py)."""

import pytest
import requests

from agents.actions import issue_bootstrap_token
from agents.models import RegistrationRecord
from agents.node.agent import Agent, AgentConfig
from agents.node.state import StateStore
from cluster.models import Node

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_agent_whose_registration_reply_was_lost_registers(live_server, tmp_path):
    _, bootstrap = issue_bootstrap_token(None, "lost reply")  # single-use
    agent = Agent(
        AgentConfig(
            server=live_server.url,
            name="lost-reply",
            state_dir=tmp_path / "agent",
            bootstrap_token=bootstrap,
            fake_gpus="8xH200",
            heartbeat_interval=0.2,
        )
    )
    session, real_post, calls = agent.client._session, agent.client._session.post, []

    def post(url, **kwargs):
        calls.append(url)
        response = real_post(url, **kwargs)  # the console commits the registration...
        if url.endswith("/register/") and len(calls) == 1:
            raise requests.ReadTimeout("the reply was lost")  # ...and the reply is lost
        return response

    session.post = post
    try:
        identity = agent.register_or_load()
        assert len(calls) == 2  # asked twice, answered once
        node = Node.objects.get(name="lost-reply")
        assert identity["node_id"] == node.pk
        assert RegistrationRecord.objects.filter(name="lost-reply").count() == 2
        agent.client.token = identity["node_token"]
        assert agent.heartbeat() is not None  # the token it got is the node's
        assert not agent.store.registering_path.exists()  # the key is gone once registered
    finally:
        agent.client.close()
        agent.store.unlock()


def test_the_registration_key_survives_a_restart_until_registered(tmp_path):
    store = StateStore(tmp_path / "s")
    key = store.registration_key("https://console", "n1")
    assert StateStore(tmp_path / "s").registration_key("https://console", "n1") == key
    assert store.registration_key("https://console", "n2") != key  # another registration
    assert oct(store.registering_path.stat().st_mode & 0o777) == "0o600"
    store.save_identity({"server": "https://console", "name": "n2", "node_token": "t"})
    assert not store.registering_path.exists()
