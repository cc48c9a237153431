"""`python -m agents` / `gpu-agent`: run the node agent.

    gpu-agent --server http://127.0.0.1:8000 --bootstrap-token gqb_… --name node-0 \\
        --state-dir /var/lib/gpu-agent --runtime process --fake-gpus 8xH200

The bootstrap token is needed only for the first start (the node's own token is then kept
in the state dir); it may come from GPU_AGENT_BOOTSTRAP_TOKEN so it stays out of `ps`.
SIGTERM or SIGINT stops the workers gracefully, ships their last logs and exits 0.
"""

import argparse
import logging
import os
import re
import signal
import socket
import sys
import threading
from pathlib import Path

from agents.node.agent import Agent, AgentConfig, AgentConfigError
from agents.node.gpus import GpuSpecError, parse_fake_spec

log = logging.getLogger("agents")

PARENT_POLL = 0.5  # seconds between looks at whether the console that started us is gone
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _port_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    try:
        ports = (int(first), int(last or first))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST, got {text!r}") from None
    if not 1024 <= ports[0] <= ports[1] <= 65535:
        raise argparse.ArgumentTypeError(f"expected 1024 <= FIRST <= LAST <= 65535, got {text!r}")
    return ports


def _distributed_arguments(p: argparse.ArgumentParser) -> None:
    """Where this node's peers reach it, and its containers' network (docs/distributed.md)."""
    p.add_argument(
        "--advertise-address",
        default=os.environ.get("GPU_AGENT_ADVERTISE_ADDRESS") or None,
        help="the address other nodes reach this one at, for MASTER_ADDR (env "
        "GPU_AGENT_ADVERTISE_ADDRESS; default: the address the console sees)",
    )
    p.add_argument(
        "--rendezvous-ports",
        type=_port_range,
        default=os.environ.get("GPU_AGENT_RENDEZVOUS_PORTS") or None,
        metavar="FIRST-LAST",
        help="ports this node lends to jobs' rendezvous, e.g. 29500-29999 (env "
        "GPU_AGENT_RENDEZVOUS_PORTS; default: the console's)",
    )
    p.add_argument(
        "--docker-host-network",
        action="store_true",
        default=os.environ.get("GPU_AGENT_DOCKER_HOST_NETWORK") == "1",
        help="run the containers of multi-worker jobs on the host's network, so workers on "
        "other nodes reach them (gloo and NCCL open a port per peer; env "
        "GPU_AGENT_DOCKER_HOST_NETWORK=1). Off: such jobs meet only within this node",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-agent", description="GPU node agent for the console")
    p.add_argument(
        "--server",
        default=os.environ.get("GPU_AGENT_SERVER"),
        help="console URL, e.g. https://console.example.com (env GPU_AGENT_SERVER)",
    )
    p.add_argument(
        "--bootstrap-token",
        default=os.environ.get("GPU_AGENT_BOOTSTRAP_TOKEN"),
        help="bootstrap token for the first registration (env GPU_AGENT_BOOTSTRAP_TOKEN)",
    )
    p.add_argument("--name", default=socket.gethostname(), help="node name (default: hostname)")
    p.add_argument(
        "--state-dir",
        default=os.environ.get("GPU_AGENT_STATE_DIR", "/var/lib/gpu-agent"),
        help="where the node token and worker records live (env GPU_AGENT_STATE_DIR)",
    )
    p.add_argument(
        "--runtime",
        choices=["process", "docker", "simulated"],
        default="docker",
        help="how workers run; 'process' runs them as local processes (never on shared nodes); "
        "'simulated' runs none: each worker is a timer of the job's SIM_RUN_SECONDS "
        "(benchmarks)",
    )
    p.add_argument("--fake-gpus", metavar="NxTYPE", help="report fake GPUs, e.g. 8xH200")
    p.add_argument("--resource-type", choices=["General-purpose", "Lingjun"], default="Lingjun")
    p.add_argument("--cpus", type=_non_negative_int, help="CPUs to offer (default: all)")
    p.add_argument("--memory-gb", type=_non_negative_int, help="memory to offer (default: all)")
    p.add_argument(
        "--heartbeat-interval",
        type=_positive_float,
        help="seconds between heartbeats (default: what the console says)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=_positive_float,
        default=10.0,
        help="seconds workers get after SIGTERM when the agent itself stops (default 10)",
    )
    p.add_argument(
        "--docker-url",
        default=os.environ.get("DOCKER_HOST"),
        help="Docker Engine API URL (env DOCKER_HOST; default the local socket)",
    )
    p.add_argument(
        "--docker-gpus",
        choices=["auto", "nvidia", "cdi", "off", "on"],
        default="auto",
        help="how GPUs reach containers: 'cdi' (CDI device names), 'nvidia' (the NVIDIA "
        "container toolkit's device request; 'on' is the old name), 'off'; 'auto' picks by "
        "what the host has: CDI specs for nvidia.com/gpu, else the toolkit, else off",
    )
    p.add_argument(
        "--parent-pid",
        type=_non_negative_int,
        help="shut down (as on SIGTERM) once this process is gone: the embedded console "
        "that started this agent",
    )
    _distributed_arguments(p)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    if not args.server:
        raise AgentConfigError("--server (or GPU_AGENT_SERVER) is required")
    if not args.server.startswith(("http://", "https://")):
        raise AgentConfigError(f"--server must be an http(s) URL, got {args.server!r}")
    if not _NAME.match(args.name):
        raise AgentConfigError(
            f"--name must be letters, digits, '.', '_' or '-' (max 200), got {args.name!r}"
        )
    if args.fake_gpus is not None:
        try:
            parse_fake_spec(args.fake_gpus)
        except GpuSpecError as exc:
            raise AgentConfigError(f"--fake-gpus: {exc}") from None
    return AgentConfig(
        server=args.server.rstrip("/"),
        name=args.name,
        state_dir=Path(args.state_dir),
        runtime=args.runtime,
        bootstrap_token=args.bootstrap_token or None,
        fake_gpus=args.fake_gpus,
        resource_type=args.resource_type,
        cpus=args.cpus,
        memory_gb=args.memory_gb,
        heartbeat_interval=args.heartbeat_interval,
        shutdown_grace=args.shutdown_grace,
        docker_url=args.docker_url,
        docker_gpus=args.docker_gpus,
        advertise_address=args.advertise_address,
        rendezvous_ports=args.rendezvous_ports,
        docker_host_network=args.docker_host_network,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    stop = threading.Event()
    try:
        config = config_from_args(args)
        agent = Agent(config, stop=stop)
    except AgentConfigError as exc:
        log.error("%s", exc)
        return 2

    def on_signal(signum, _frame) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()
        agent.wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.parent_pid:
        threading.Thread(
            target=_watch_parent, args=(args.parent_pid, stop, agent), daemon=True
        ).start()
    return agent.run()


def _watch_parent(parent: int, stop: threading.Event, agent: Agent) -> None:
    """An embedded agent dies with its console, however the console ended (`kill -9`
    included): it would otherwise hold the state dir and keep the next console's agent out."""
    while not stop.wait(PARENT_POLL):
        if os.getppid() != parent:
            log.warning("the console that started this agent (pid %s) is gone", parent)
            stop.set()
            agent.wake.set()
            return


if __name__ == "__main__":
    sys.exit(main())
