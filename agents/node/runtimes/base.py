"""What the agent needs from a worker runtime (DESIGN §7): `process` and `docker`.

A runtime launches workers, stops them (SIGTERM, then SIGKILL after the grace), and tells the
agent what it holds. It pushes output lines and exits through two callbacks so the agent can
ship logs and send a heartbeat at once; everything else is polled (`workers()`), which keeps
the agent level-triggered.

Workers outlive the agent: after a crash the next agent `adopt`s what is still there (docker:
containers by label; process: session leaders by their environment marker) and reads their
output again from the start, skipping the lines a previous run already shipped. Output lines
are counted the same way on every read (agents.node.lines), so "skip N lines" is exact.
"""

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from protocol.agent import WorkerSpec

# (pod_id, line without its newline, source): source=True for the worker's own output,
# False for a line the agent adds (image pull progress, "stopping: sending SIGTERM"…).
LineSink = Callable[[int, str, bool], None]
ExitSink = Callable[[int], None]  # pod_id

# Identifies a worker's processes (or container) as belonging to a pod attempt, so that an
# agent restarting after a crash can find what a previous run left behind.
WORKER_MARKER = "GPU_WORKER_ID"
# Host paths the agent gives a worker (agents.node.progress); the docker runtime maps them.
CHECKPOINT_ENV = "CHECKPOINT_DIR"
PROGRESS_ENV = "PROGRESS_FILE"
RESUME_ENV = "RESUME_FROM"
TAIL_LINES = 20
TAIL_CHARS = 4000


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
    node: str = ""  # the node's name (container labels)

    @classmethod
    def from_worker_spec(cls, spec: WorkerSpec, node: str = "") -> "LaunchSpec":
        return cls(
            node=node,
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
    starting: bool = False  # still being prepared (image pull): not reported yet


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

    def adopt(
        self, skip: Mapping[int, int], prepare: Callable[[int, int], None] | None = None
    ) -> dict[int, int]:
        """Take over the workers a previous agent run left (running or exited, not yet
        forgotten); `skip[pod_id]` output lines of each were already shipped. `prepare(pod_id,
        attempt)` runs before a worker's output is read. Returns {pod_id: attempt}."""

    def kill_leftovers(self, markers: set[str]) -> int:
        """Kill workers a previous agent run left behind (by marker); returns how many."""

    def shutdown(self, grace_seconds: float) -> None:
        """Stop every worker with the grace and wait until all have exited."""


class SourceLines:
    """One worker's output lines: skips those a previous agent run shipped, keeps the tail
    for the error message, and passes the rest on as source lines."""

    def __init__(self, pod_id: int, sink: LineSink, skip: int = 0) -> None:
        self.pod_id = pod_id
        self._sink = sink
        self._skip = skip
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def __call__(self, line: str) -> None:
        self.tail.append(line)
        if self._skip > 0:
            self._skip -= 1
            return
        self._sink(self.pod_id, line, True)

    def agent(self, line: str) -> None:
        self.tail.append(line)
        self._sink(self.pod_id, line, False)

    def error_tail(self) -> str:
        return "\n".join(self.tail)[-TAIL_CHARS:]


class Stoppable(Protocol):
    """What `stop_with_grace` needs of a runtime's worker record."""

    lock: threading.Lock
    lines: SourceLines
    stopping: bool
    kill_at: float | None
    timers: list[threading.Timer]


def stop_with_grace(
    worker: Stoppable,
    grace_seconds: float,
    *,
    finished: Callable[[], bool],
    send: Callable[[signal.Signals], None],
) -> None:
    """SIGTERM once, then SIGKILL when the grace ends; shared by every runtime.

    A second stop with a shorter grace brings the kill forward (a graceful stop escalated to
    terminate); a longer one changes nothing. `finished` and `send` are called with
    `worker.lock` held.
    """
    grace = max(0.0, float(grace_seconds))
    kill_at = time.monotonic() + grace
    with worker.lock:
        if finished():
            return
        if not worker.stopping:
            worker.stopping = True
            worker.lines.agent(f"[agent] stopping: sending SIGTERM, grace {grace:g}s")
            send(signal.SIGTERM)
        if worker.kill_at is not None and kill_at >= worker.kill_at:
            return
        worker.kill_at = kill_at
        if grace == 0:
            send(signal.SIGKILL)
            return

        def kill_after_grace() -> None:
            with worker.lock:
                if finished():
                    return
                worker.lines.agent(f"[agent] grace of {grace:g}s ran out: sending SIGKILL")
                send(signal.SIGKILL)

        timer = threading.Timer(grace, kill_after_grace)
        timer.daemon = True
        worker.timers.append(timer)
        timer.start()
