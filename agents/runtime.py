"""What the agent needs from a worker runtime (DESIGN §7): `process` now, `docker` later.

A runtime launches workers, stops them (SIGTERM, then SIGKILL after the grace), and tells the
agent what it holds. It pushes output lines and exits through two callbacks so the agent can
ship logs and send a heartbeat at once; everything else is polled (`workers()`), which keeps
the agent level-triggered.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from agents.protocol import WorkerSpec

LineSink = Callable[[int, str], None]  # (pod_id, line without its newline)
ExitSink = Callable[[int], None]  # pod_id

# Identifies a worker's processes (or container) as belonging to a pod attempt, so that an
# agent restarting after a crash can find what a previous run left behind.
WORKER_MARKER = "GPU_WORKER_ID"


class LaunchError(Exception):
    """The runtime could not start the worker (bad command, no /bin/sh, image pull failed…)."""


@dataclass(frozen=True)
class LaunchSpec:
    pod_id: int
    job_id: int
    attempt: int
    rank: int
    world_size: int
    image: str
    command: str
    env: Mapping[str, str] = field(default_factory=dict)
    gpu_indices: tuple[int, ...] = ()
    cpus: int = 0
    memory_gb: int = 0

    @classmethod
    def from_worker_spec(cls, spec: WorkerSpec) -> "LaunchSpec":
        return cls(
            pod_id=spec.pod_id,
            job_id=spec.job_id,
            attempt=spec.attempt,
            rank=spec.rank,
            world_size=spec.world_size,
            image=spec.image,
            command=spec.command,
            env=dict(spec.env),
            gpu_indices=tuple(spec.gpu_indices),
            cpus=spec.cpus,
            memory_gb=spec.memory_gb,
        )

    @property
    def marker(self) -> str:
        return worker_marker(self.pod_id, self.attempt)


@dataclass(frozen=True)
class WorkerState:
    pod_id: int
    attempt: int
    running: bool
    gpu_indices: tuple[int, ...] = ()
    exit_code: int | None = None
    error: str = ""  # tail of the output when the worker failed
    container_id: str = ""


def worker_marker(pod_id: int, attempt: int) -> str:
    return f"{pod_id}.{attempt}"


def injected_env(spec: LaunchSpec) -> dict[str, str]:
    """Variables every worker gets, whatever the runtime; they override the job's env."""
    return {
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in spec.gpu_indices),
        "RANK": str(spec.rank),
        "WORLD_SIZE": str(spec.world_size),
        "MASTER_ADDR": "127.0.0.1",
        # One port per job so two jobs on one host do not collide.
        "MASTER_PORT": str(20000 + spec.job_id % 20000),
        "JOB_ID": str(spec.job_id),
        "POD_ID": str(spec.pod_id),
        "ATTEMPT": str(spec.attempt),
        "PYTHONUNBUFFERED": "1",
        WORKER_MARKER: spec.marker,
    }


def normalize_exit_code(returncode: int) -> int:
    """Python reports death by signal N as -N; shells and Docker say 128+N (143, 137)."""
    return 128 - returncode if returncode < 0 else returncode


class Runtime(Protocol):
    name: str

    def launch(self, spec: LaunchSpec) -> None:
        """Start the worker; raises LaunchError. Never called twice for one pod."""

    def stop(self, pod_id: int, grace_seconds: float) -> None:
        """SIGTERM now, SIGKILL once the grace runs out. Idempotent; a shorter grace in a
        later call brings the kill forward. Does not wait."""

    def workers(self) -> list[WorkerState]:
        """Every worker the runtime holds, running or exited and not yet forgotten."""

    def forget(self, pod_id: int) -> None:
        """Drop an exited worker once its exit has been reported."""

    def kill_leftovers(self, markers: set[str]) -> int:
        """Kill workers a previous agent run left behind (by marker); returns how many."""

    def shutdown(self, grace_seconds: float) -> None:
        """Stop every worker with the grace and wait until all have exited."""
