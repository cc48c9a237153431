"""How the agent is configured (`python -m agents.node --help`), and the runtime it builds."""

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from agents.node import fence, mpi_launch
from agents.node.progress import checkpoint_root
from agents.node.runtimes.base import ExitSink, LaunchError, LineSink, Runtime
from agents.node.runtimes.processes import ProcessRuntime
from agents.node.state import AgentConfigError

log = logging.getLogger(__name__)

AGENT_VERSION = "0.1.0"
DEFAULT_INTERVAL = 5.0


@dataclass(frozen=True)
class AgentConfig:
    server: str
    name: str
    state_dir: Path
    runtime: str = "process"
    bootstrap_token: str | None = None
    fake_gpus: str | None = None
    resource_type: str = "Lingjun"
    cpus: int | None = None
    memory_gb: int | None = None
    heartbeat_interval: float | None = None  # None: the console's
    shutdown_grace: float = 10.0
    docker_url: str | None = None  # default: DOCKER_HOST or the local socket
    docker_gpus: str = "auto"  # how GPUs reach containers: auto, nvidia, cdi, off (gpu_attach)
    # Distributed jobs (docs/distributed.md): the address peers reach this node at (None: the
    # one the console sees) and the ports it lends to rendezvous (None: the console's default).
    advertise_address: str | None = None
    rendezvous_ports: tuple[int, int] | None = None
    docker_host_network: bool = False  # multi-worker jobs' containers on the host network


def host_memory_gb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30
    except (ValueError, OSError):
        return 0


def make_runtime(
    config: AgentConfig, state_dir: Path, on_line: LineSink, on_exit: ExitSink
) -> Runtime:
    if config.runtime == "simulated":
        from agents.node.runtimes.simulated import SimulatedRuntime

        # No worker reads a lease, but the agent renews the node's lease file all the same.
        fence_folder(state_dir).mkdir(parents=True, exist_ok=True)
        return SimulatedRuntime(on_line, on_exit)
    fence_dir = fence_folder(state_dir)
    if config.runtime == "process":
        try:
            return ProcessRuntime(state_dir / "work", on_line, on_exit, fence_dir=fence_dir)
        except LaunchError as exc:
            raise AgentConfigError(str(exc)) from exc
    if config.runtime != "docker":
        raise AgentConfigError(f"unknown runtime {config.runtime!r}")
    from agents.node.runtimes.containers import DockerOptions, DockerRuntime

    try:
        fence.install(fence_dir)  # bind-mounted read-only into every container
        mpi_launch.install(fence_dir)  # an MPI job's exec channel, run by the image's python3
    except (fence.FenceUnavailable, OSError) as exc:
        raise AgentConfigError(f"no worker fence wrapper: {exc}") from exc
    root = checkpoint_root(state_dir)  # job folders under it are bind-mounted, one each
    root.mkdir(parents=True, exist_ok=True)
    try:
        runtime = DockerRuntime(
            DockerOptions(
                node=config.name,
                checkpoint_root=root,
                fence_dir=fence_dir,
                host_network=config.docker_host_network,
            ),
            on_line,
            on_exit,
            base_url=config.docker_url,
        )
    except LaunchError as exc:
        raise AgentConfigError(str(exc)) from exc
    from agents.node.runtimes.gpu_attach import choose_gpu_attach

    attach = choose_gpu_attach(config.docker_gpus, runtime.engine_info())
    if attach.style == "off":
        log.warning("GPUs are not attached to containers: %s", attach.why)
    else:
        log.info("GPUs are attached by %s device request (%s)", attach.style, attach.why)
    runtime.opts = DockerOptions(
        node=config.name,
        checkpoint_root=root,
        gpus=attach.style,
        cdi_names=attach.cdi_names,
        fence_dir=fence_dir,
        host_network=config.docker_host_network,
    )
    return runtime


def fence_folder(state_dir: Path) -> Path:
    """The fence wrapper and the node's lease (agents.node.fence)."""
    return Path(state_dir) / "fence"
