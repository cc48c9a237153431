"""What the agent needs from a worker runtime (docs/agent-protocol.md): `process` and `docker`.

A runtime launches workers, stops them (SIGTERM, then SIGKILL after the grace), and tells the
agent what it holds. It pushes output lines and exits through two callbacks so the agent can
ship logs and send a heartbeat at once; everything else is polled (`workers()`), which keeps
the agent level-triggered.

Workers outlive the agent: after a crash the next agent `adopt`s what is still there (docker:
containers by label; process: session leaders by their environment marker) and reads their
output again from the start, skipping the lines a previous run already shipped. Output lines
are counted the same way on every read (agents.node.lines), so "skip N lines" is exact.
"""

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from protocol.agent import ResumeIdentity, WorkerSpec
from protocol.devices import DRIVER_CAPABILITIES, NO_DEVICES, is_device_env, without_device_env

log = logging.getLogger(__name__)

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
OUTPUT_ENV = "OUTPUT_DIR"  # the attempt's staging folder (docs/results.md)
ACCEPTED_ENV = "ACCEPTED_UNITS_FILE"
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
    # The same GPUs by UUID (what the worker is given); the agent fills them in from its
    # own NVML view when the console sent none (agents.node.gpus.resolve).
    gpu_uuids: tuple[str, ...] = ()
    cpus: int = 0
    memory_gb: int = 0
    node: str = ""  # the node's name (container labels)
    workspace_id: int = 0  # whose checkpoint area the worker's folder is in (0: the root)
    # The console's rendezvous variables for this attempt (docs/distributed.md): they
    # replace the single-host defaults below.
    rendezvous: Mapping[str, str] = field(default_factory=dict)
    # Read-only data folders: name → host path, resolved inside the workspace's area.
    data: Mapping[str, str] = field(default_factory=dict)
    # The run whose accepted units this attempt carries (docs/results.md, "Resume without
    # duplicates"): a runtime that resolves an image compares its digest before the start.
    resume_identity: ResumeIdentity | None = None

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
            gpu_uuids=tuple(spec.gpu_uuids),
            cpus=spec.cpus,
            memory_gb=spec.memory_gb,
            workspace_id=spec.workspace_id,
            rendezvous=dict(spec.rendezvous),
            resume_identity=spec.resume_identity,
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
    gpu_uuids: tuple[str, ...] = ()
    exit_code: int | None = None
    error: str = ""  # tail of the output when the worker failed
    container_id: str = ""
    starting: bool = False  # still being prepared (image pull): not reported yet
    ended_by: str = ""  # WorkerReport.ended_by, when the runtime refused the start itself


def worker_marker(pod_id: int, attempt: int) -> str:
    return f"{pod_id}.{attempt}"


def device_env(spec: LaunchSpec) -> dict[str, str]:
    """Which GPUs the worker sees (protocol.devices): its GPUs by UUID, numbered in PCI bus
    order like NVML (CUDA's default order puts the fastest first, so on a mixed node an index
    would name another GPU). No GPU: none at all (`void` for the NVIDIA toolkit, an empty
    list for CUDA)."""
    visible = spec.gpu_uuids or tuple(str(i) for i in spec.gpu_indices)
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(visible),
        "NVIDIA_VISIBLE_DEVICES": ",".join(visible) if visible else NO_DEVICES,
        "NVIDIA_DRIVER_CAPABILITIES": DRIVER_CAPABILITIES,
    }


def worker_env(spec: LaunchSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A worker's whole environment: `base` (the agent's, for local processes) and the job's,
    both without device-visibility variables, then what the agent injects on top."""
    inherited, _ = without_device_env(dict(base or {}))
    job, _ = without_device_env(dict(spec.env))
    return {**inherited, **job, **injected_env(spec)}


def data_env(name: str) -> str:
    """The variable naming a data folder: DATA_<NAME> ("imagenet-val" → DATA_IMAGENET_VAL)."""
    return f"DATA_{name.upper().replace('-', '_')}"


def injected_env(spec: LaunchSpec) -> dict[str, str]:
    """Variables every worker gets, whatever the runtime; they override the job's env. The
    console's rendezvous (rank 0's node and the port reserved there) replaces the
    single-host defaults; an older console sends none."""
    return {
        **device_env(spec),
        "RANK": str(spec.rank),
        "WORLD_SIZE": str(spec.world_size),
        "MASTER_ADDR": "127.0.0.1",
        # One port per job so two jobs on one host do not collide.
        "MASTER_PORT": str(20000 + spec.job_id % 20000),
        **{k: v for k, v in spec.rendezvous.items() if not is_device_env(k)},
        **{data_env(name): path for name, path in spec.data.items()},
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
    """One worker's output lines: skips those a previous agent run shipped, keeps the tail of
    the worker's own output for the error message, and passes the rest on as source lines."""

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
        # The agent's own notes ("[agent] process runtime: image … is ignored") go to the
        # log but not into the error tail: that quotes what the worker printed.
        self._sink(self.pod_id, line, False)

    def error_tail(self) -> str:
        return "\n".join(self.tail)[-TAIL_CHARS:]


@dataclass
class Worker:
    """What every runtime keeps about one worker; a runtime subclasses it with its handles
    (a process id, a container id)."""

    pod_id: int
    attempt: int
    gpu_indices: tuple[int, ...]
    lines: SourceLines
    gpu_uuids: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)
    starting: bool = False  # being prepared (image pull): not reported yet
    stopping: bool = False
    kill_at: float | None = None
    timers: list[threading.Timer] = field(default_factory=list)
    exit_code: int | None = None
    error: str = ""
    ended_by: str = ""  # the runtime refused the start (WorkerState.ended_by)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def handle(self) -> str:
        """How the runtime names it to the console (container id, `process:<pid>`)."""
        return ""

    def state(self) -> WorkerState:
        done = self.done.is_set()
        return WorkerState(
            pod_id=self.pod_id,
            attempt=self.attempt,
            running=not done,
            gpu_indices=self.gpu_indices,
            gpu_uuids=self.gpu_uuids,
            exit_code=self.exit_code if done else None,
            error=self.error if done else "",
            container_id=self.handle,
            starting=self.starting and not done,
            ended_by=self.ended_by if done else "",
        )


class WorkerTable:
    """The part every runtime shares: the table of its workers, stopping with a grace,
    finishing, forgetting and shutting down. A runtime supplies `launch`, `adopt`,
    `kill_leftovers` and three hooks: `_signal` (deliver a signal), `_has_exited` (checked
    with the worker's lock held before any signal) and `_release` (clean up after a
    forgotten worker)."""

    name = ""
    join_timeout = 5.0  # how long shutdown waits beyond the grace for output to drain

    def __init__(self, on_line: LineSink, on_exit: ExitSink) -> None:
        self._on_line = on_line
        self._on_exit = on_exit
        self._workers: dict[int, Worker] = {}
        self._lock = threading.Lock()

    # -- hooks ---------------------------------------------------------------------------
    def _signal(self, worker: Worker, sig: signal.Signals) -> None:
        raise NotImplementedError

    def _has_exited(self, worker: Worker) -> bool:
        return worker.done.is_set()

    def _release(self, worker: Worker) -> None:
        """A forgotten (exited and reported) worker's leftovers: files, a container."""

    # -- the table -----------------------------------------------------------------------
    def _add(self, worker: Worker) -> None:
        with self._lock:
            if worker.pod_id in self._workers:
                raise LaunchError(f"pod {worker.pod_id} is already running here")
            self._workers[worker.pod_id] = worker

    def _get(self, pod_id: int) -> Worker | None:
        with self._lock:
            return self._workers.get(pod_id)

    def has(self, pod_id: int) -> bool:
        return self._get(pod_id) is not None

    def _finish(self, worker: Worker, code: int | None, error: str) -> None:
        """The worker has exited (its last output read): record it and tell the agent."""
        worker.exit_code = code
        worker.error = error
        worker.starting = False
        worker.done.set()
        log.info("pod %s exited with code %s", worker.pod_id, code)
        self._on_exit(worker.pod_id)

    # -- what the agent calls ------------------------------------------------------------
    def stop(self, pod_id: int, grace_seconds: float) -> None:
        worker = self._get(pod_id)
        if worker is not None:
            stop_with_grace(
                worker,
                grace_seconds,
                finished=lambda: self._has_exited(worker),
                send=lambda sig: self._signal(worker, sig),
            )

    def workers(self) -> list[WorkerState]:
        with self._lock:
            workers = list(self._workers.values())
        return [w.state() for w in workers]

    def forget(self, pod_id: int) -> None:
        with self._lock:
            worker = self._workers.get(pod_id)
            if worker is None or not worker.done.is_set():
                return
            del self._workers[pod_id]
        self._release(worker)

    def wait(self, pod_id: int, timeout: float) -> bool:
        worker = self._get(pod_id)
        return worker is None or worker.done.wait(timeout)

    def shutdown(self, grace_seconds: float) -> None:
        with self._lock:
            workers = [w for w in self._workers.values() if not w.done.is_set()]
        for w in workers:
            self.stop(w.pod_id, grace_seconds)
        deadline = time.monotonic() + grace_seconds + self.join_timeout + 5
        for w in workers:
            w.done.wait(max(0.0, deadline - time.monotonic()))


def stop_with_grace(
    worker: Worker,
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
