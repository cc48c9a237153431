"""The process runtime: workers are local subprocesses (embedded default and tests).

Each worker is `/bin/sh -c <command>` in its own session (so its process group can be
signalled as a whole), with stdout and stderr merged into one pipe. Two threads per worker:
a reader that splits the output into lines, and a waiter that notices the exit.

Like a container, a worker is over when its main process exits: the waiter then kills what
is left of the process group. It does so before reaping the main process (`waitid` with
WNOWAIT), so the group id cannot have been reused by an unrelated process when it is
signalled; stop and kill take the same lock and check the same flag.

Never enable this runtime on a shared node: workers run as the agent's user, unconfined.
"""

import codecs
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.runtime import (
    WORKER_MARKER,
    ExitSink,
    LaunchError,
    LaunchSpec,
    LineSink,
    WorkerState,
    injected_env,
    normalize_exit_code,
)

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 16 * 1024
TAIL_LINES = 20
TAIL_CHARS = 4000
READER_JOIN_TIMEOUT = 5.0
# Agent variables (its bootstrap token among them) never leak into workers.
_PRIVATE_ENV_PREFIXES = ("GPU_AGENT_",)


def split_output(stream, emit, max_bytes: int = MAX_LINE_BYTES) -> None:
    """Read a binary stream to its end, calling `emit(line)` for each line: newline removed,
    invalid UTF-8 replaced, lines longer than `max_bytes` split (a multi-byte character cut
    at the split is carried over whole to the next part)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    after_split = False
    while True:
        chunk = stream.readline(max_bytes)
        if not chunk:
            break
        if chunk == b"\n" and after_split:
            after_split = False  # the newline ending a line that was exactly split at the limit
            continue
        text = decoder.decode(chunk)
        after_split = not chunk.endswith(b"\n")
        emit(text[:-1] if text.endswith("\n") else text)
    rest = decoder.decode(b"", final=True)
    if rest:
        emit(rest)


@dataclass
class _Worker:
    spec: LaunchSpec
    proc: subprocess.Popen
    lock: threading.Lock = field(default_factory=threading.Lock)
    tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    leader_exited: bool = False
    stopping: bool = False
    kill_at: float | None = None
    timers: list[threading.Timer] = field(default_factory=list)
    exit_code: int | None = None
    error: str = ""
    done: threading.Event = field(default_factory=threading.Event)

    def signal_group(self, sig: int) -> None:
        """Signal the whole process group; caller holds `lock`. After the main process has
        exited the group is already gone (the waiter killed it), so nothing is sent."""
        if self.leader_exited:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


class ProcessRuntime:
    name = "process"

    def __init__(
        self,
        work_root: Path,
        on_line: LineSink,
        on_exit: ExitSink,
        *,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.work_root = Path(work_root)
        self._on_line = on_line
        self._on_exit = on_exit
        source = os.environ if base_env is None else base_env
        self._base_env = {
            k: v for k, v in source.items() if not k.startswith(_PRIVATE_ENV_PREFIXES)
        }
        self._workers: dict[int, _Worker] = {}
        self._lock = threading.Lock()

    # --- launching and output ---

    def launch(self, spec: LaunchSpec) -> None:
        with self._lock:
            if spec.pod_id in self._workers:
                raise LaunchError(f"pod {spec.pod_id} is already running here")
        workdir = self.work_root / f"pod-{spec.pod_id}-{spec.attempt}"
        env = {**self._base_env, **spec.env, **injected_env(spec)}
        try:
            workdir.mkdir(parents=True, exist_ok=True)
            proc = subprocess.Popen(
                ["/bin/sh", "-c", spec.command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                cwd=workdir,
                close_fds=True,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start /bin/sh: {exc}") from exc
        worker = _Worker(spec=spec, proc=proc)
        with self._lock:
            self._workers[spec.pod_id] = worker
        if spec.image:
            log.info("pod %s: process runtime ignores image %s", spec.pod_id, spec.image)
            self._emit(
                worker,
                f"[agent] process runtime: image {spec.image!r} is ignored; "
                "the command runs directly on this host",
            )
        reader = threading.Thread(
            target=self._read, args=(worker,), name=f"pod-{spec.pod_id}-out", daemon=True
        )
        reader.start()
        threading.Thread(
            target=self._wait, args=(worker, reader), name=f"pod-{spec.pod_id}-wait", daemon=True
        ).start()

    def _emit(self, worker: _Worker, line: str) -> None:
        worker.tail.append(line)
        self._on_line(worker.spec.pod_id, line)

    def _read(self, worker: _Worker) -> None:
        try:
            split_output(worker.proc.stdout, lambda line: self._emit(worker, line))
        except (OSError, ValueError) as exc:
            log.warning("pod %s: reading output failed: %s", worker.spec.pod_id, exc)
        finally:
            worker.proc.stdout.close()  # the reader owns the pipe: nobody closes it under us

    def _wait(self, worker: _Worker, reader: threading.Thread) -> None:
        pid = worker.proc.pid
        with contextlib.suppress(ChildProcessError):  # reaped elsewhere: wait() copes
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        with worker.lock:
            # Whatever the main process left running dies with it, as in a container.
            worker.signal_group(signal.SIGKILL)
            worker.leader_exited = True
            for timer in worker.timers:
                timer.cancel()
        code = normalize_exit_code(worker.proc.wait())
        reader.join(READER_JOIN_TIMEOUT)
        if reader.is_alive():  # a process that escaped the group (setsid) holds the pipe
            log.warning("pod %s: output still open after exit; not waiting", worker.spec.pod_id)
        worker.exit_code = code
        if code != 0:
            worker.error = "\n".join(worker.tail)[-TAIL_CHARS:]
        worker.done.set()
        log.info("pod %s exited with code %s", worker.spec.pod_id, code)
        self._on_exit(worker.spec.pod_id)

    # --- stopping ---

    def stop(self, pod_id: int, grace_seconds: float) -> None:
        with self._lock:
            worker = self._workers.get(pod_id)
        if worker is None:
            return
        grace = max(0.0, float(grace_seconds))
        kill_at = time.monotonic() + grace
        with worker.lock:
            if worker.leader_exited:
                return
            if not worker.stopping:
                worker.stopping = True
                self._emit(worker, f"[agent] stopping: sending SIGTERM, grace {grace:g}s")
                worker.signal_group(signal.SIGTERM)
            if worker.kill_at is not None and kill_at >= worker.kill_at:
                return
            worker.kill_at = kill_at
            if grace == 0:
                worker.signal_group(signal.SIGKILL)
                return
            timer = threading.Timer(grace, self._kill_after_grace, args=(worker, grace))
            timer.daemon = True
            worker.timers.append(timer)
            timer.start()

    def _kill_after_grace(self, worker: _Worker, grace: float) -> None:
        with worker.lock:
            if worker.leader_exited:
                return
            self._emit(worker, f"[agent] grace of {grace:g}s ran out: sending SIGKILL")
            worker.signal_group(signal.SIGKILL)

    # --- state ---

    def workers(self) -> list[WorkerState]:
        with self._lock:
            workers = list(self._workers.values())
        states = []
        for w in workers:
            done = w.done.is_set()
            states.append(
                WorkerState(
                    pod_id=w.spec.pod_id,
                    attempt=w.spec.attempt,
                    running=not done,
                    gpu_indices=w.spec.gpu_indices,
                    exit_code=w.exit_code if done else None,
                    error=w.error if done else "",
                    container_id=f"process:{w.proc.pid}",
                )
            )
        return states

    def forget(self, pod_id: int) -> None:
        with self._lock:
            worker = self._workers.get(pod_id)
            if worker is not None and worker.done.is_set():
                del self._workers[pod_id]

    def wait(self, pod_id: int, timeout: float) -> bool:
        with self._lock:
            worker = self._workers.get(pod_id)
        return worker is None or worker.done.wait(timeout)

    def shutdown(self, grace_seconds: float) -> None:
        with self._lock:
            workers = [w for w in self._workers.values() if not w.done.is_set()]
        for w in workers:
            self.stop(w.spec.pod_id, grace_seconds)
        deadline = time.monotonic() + grace_seconds + READER_JOIN_TIMEOUT + 5
        for w in workers:
            w.done.wait(max(0.0, deadline - time.monotonic()))

    def kill_leftovers(self, markers: set[str]) -> int:
        """SIGKILL processes that carry one of these worker markers in their environment:
        workers of a previous agent run that crashed (they live in their own sessions, so
        they outlive the agent). Linux only; elsewhere nothing is found."""
        if not markers:
            return 0
        wanted = {f"{WORKER_MARKER}={m}".encode() for m in markers}
        killed = 0
        proc_root = Path("/proc")
        if not proc_root.is_dir():
            return 0
        for entry in proc_root.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue  # gone, or not ours to read
            if wanted.intersection(environ.split(b"\0")):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
                except (ProcessLookupError, PermissionError):
                    pass
        return killed
