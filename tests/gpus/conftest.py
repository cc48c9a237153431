"""Fixtures for the GPU tests: the stand-in NVML installed as `pynvml`, and the Docker-API
engine (podman's service) of the agent tests."""

import sys

import pytest

from agents.actions import issue_bootstrap_token
from agents.node.agent import Agent, AgentConfig
from agents.node.gpus import GpuSource
from tests.agents.conftest import docker_url  # noqa: F401 - the fixture
from tests.gpus.fakenvml import FakeNvml, World, world_of


@pytest.fixture
def world() -> World:
    return world_of(4)


@pytest.fixture
def nvml(world, monkeypatch) -> FakeNvml:
    """`import pynvml` yields the stand-in over `world`, as the agent imports the real one."""
    fake = FakeNvml(world)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.fixture
def live_agent(nvml, live_server, tmp_path):
    """A real agent (process runtime) on the stand-in NVML, registered with a live console;
    the test drives its cycles (heartbeat, step) itself."""
    _, bootstrap = issue_bootstrap_token(None, "health")
    config = AgentConfig(
        server=live_server.url,
        name="nvml-node",
        state_dir=tmp_path / "s",
        bootstrap_token=bootstrap,
        cpus=64,
        memory_gb=512,
    )
    agent = Agent(config, gpus=GpuSource(None, "nvml-node"))
    identity = agent.register_or_load()
    agent.client.token = identity["node_token"]
    agent._log_client = agent.client.copy()
    yield agent
    agent.runtime.shutdown(0)
    agent.gpus.close()
    agent.client.close()
    agent._log_client.close()
    agent.shipper.close_all()
    agent.store.unlock()
