"""The process runtime: workers are local processes (embedded default and tests).

Each worker is `/bin/sh -c <command>` under the fence wrapper (agents.node.fence: a small
static C program) in its own session, so its process group can be signalled as a whole, and
the wrapper stops it when the node's lease with the console runs out. Its output goes to a
file in its work dir, and the wrapper writes the exit code next to it: like a container, a
worker keeps running when the agent dies, and a restarted agent adopts it (found by the
marker in its environment), reads its output again from the start skipping what was
shipped, and learns its exit code from the file.

Like a container, a worker is over when its main process exits: the wrapper then kills what
is left of the process group. However the wrapper ended (its worker's own `kill -9 $PPID`
included), and whether this agent started it or adopted it, the agent then kills the
worker's whole session and every process carrying its marker, and sees them gone, before
it reports the worker ended (agents.node.runtimes.sessions): no second copy of a rank can
start while anything of the first still runs. A wrapper of its own is reaped only after
that (`waitid` with WNOWAIT), so its session id cannot have been reused meanwhile; stop and
kill take the same lock and check the same flag. Adopted workers are watched through a
pidfd; the wrapper's pid and start time are kept in the work dir (`wrapper`), so a worker
whose wrapper died while no agent was watching is still found and killed on adoption.

Never enable this runtime on a shared node: workers run as the agent's user, unconfined.
"""

import contextlib
import logging
import os
import re
import select
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.node import fence
from agents.node.lines import MAX_LINE_BYTES, LineSplitter, split_chunks
from agents.node.runtimes import sessions
from agents.node.runtimes.base import (
    WORKER_MARKER,
    ExitSink,
    LaunchError,
    LaunchSpec,
    LineSink,
    SourceLines,
    Worker,
    WorkerTable,
    normalize_exit_code,
    worker_env,
)

log = logging.getLogger(__name__)

READER_JOIN_TIMEOUT = 5.0
POLL = 0.05  # how often a worker's output file is checked for new bytes
HOME_MARKER = "GPU_WORKER_HOME"  # which agent's work root a worker belongs to
OUTPUT = "output.log"
EXIT_FILE = "exit_code"
WRAPPER_FILE = "wrapper"  # "PID START_TICKS" of the worker's fence wrapper (its session)
FENCED = "stopped by its fence: the node's lease with the console ran out"
_WORKDIR = re.compile(r"^pod-(\d+)-(\d+)$")
# Agent variables (its bootstrap token among them) never leak into workers.
_PRIVATE_ENV_PREFIXES = ("GPU_AGENT_",)

__all__ = ["MAX_LINE_BYTES", "ProcessRuntime", "split_output"]


def split_output(stream, emit, max_bytes: int = MAX_LINE_BYTES) -> None:
    """Read a binary stream to its end, calling `emit(line)` for each line (agents.node.lines)."""
    split_chunks(iter(lambda: stream.read1(65536), b""), emit, max_bytes)


@dataclass(kw_only=True)
class _Process(Worker):
    pid: int  # the wrapper's (0: it had exited when this agent adopted the worker)
    workdir: Path
    proc: subprocess.Popen | None = None  # None when adopted from a previous agent run
    session: int = 0  # the worker's session id: the wrapper's pid, even once it is gone
    started: int | None = None  # the wrapper's start time (sessions.start_ticks)
    leader_exited: bool = False
    killed: bool = False
    output_end: threading.Event = field(default_factory=threading.Event)

    @property
    def handle(self) -> str:
        return f"process:{self.pid}"

    def signal_group(self, sig: int) -> None:
        """Signal the whole process group; caller holds `lock`. After the main process has
        exited the group is already gone (killed with it), so nothing is sent."""
        if self.leader_exited:
            return
        if sig == signal.SIGKILL:
            self.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


def _read_exit_code(workdir: Path) -> tuple[int | None, bool]:
    """The exit code the wrapper wrote, and whether its fence stopped the worker."""
    try:
        words = (workdir / EXIT_FILE).read_text().split()
        return int(words[0]), words[1:] == ["fenced"]
    except (OSError, ValueError, IndexError):
        return None, False


def read_only_data(folders) -> list[str]:
    """The worker's data folders read-only (docs/distributed.md): the command runs in a
    mount namespace of its own where each is bind-mounted read-only over itself (the
    agent's user namespace when it is not root). Empty: no data, no namespace."""
    folders = sorted(folders)
    if not folders:
        return []
    mounts = "".join(
        f"mount --bind {shlex.quote(f)} {shlex.quote(f)} && "
        f"mount -o remount,bind,ro {shlex.quote(f)} {shlex.quote(f)} && "
        for f in folders
    )
    namespace = ["unshare", "-m", "--propagation", "private"]
    if os.geteuid() != 0:
        namespace.insert(1, "-r")
    return [*namespace, "/bin/sh", "-c", f'{mounts}exec "$@"', "data"]


class ProcessRuntime(WorkerTable):
    name = "process"
    join_timeout = READER_JOIN_TIMEOUT

    def __init__(
        self,
        work_root: Path,
        on_line: LineSink,
        on_exit: ExitSink,
        *,
        base_env: Mapping[str, str] | None = None,
        fence_dir: Path | None = None,
    ) -> None:
        super().__init__(on_line, on_exit)
        self.work_root = Path(work_root)
        self.home = str(self.work_root.resolve())
        # The wrapper and the lease it reads (agents.node.fence); no lease file: no fence.
        folder = Path(fence_dir) if fence_dir is not None else self.work_root.parent / "fence"
        try:
            self.wrapper = str(fence.install(folder))
        except (fence.FenceUnavailable, OSError) as exc:
            raise LaunchError(f"no worker fence wrapper: {exc}") from exc
        self.lease = str(fence.Lease(folder).path)
        source = os.environ if base_env is None else base_env
        self._base_env = {
            k: v for k, v in source.items() if not k.startswith(_PRIVATE_ENV_PREFIXES)
        }

    # --- launching and output ---

    def launch(self, spec: LaunchSpec) -> None:
        if self.has(spec.pod_id):
            raise LaunchError(f"pod {spec.pod_id} is already running here")
        workdir = self.work_root / f"pod-{spec.pod_id}-{spec.attempt}"
        env = {**worker_env(spec, self._base_env), HOME_MARKER: self.home}
        try:
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / EXIT_FILE).unlink(missing_ok=True)
            out = os.open(workdir / OUTPUT, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                wrapper = [self.wrapper, self.lease, str(workdir / EXIT_FILE), "--"]
                proc = subprocess.Popen(
                    [*wrapper, *read_only_data(spec.data.values()), "/bin/sh", "-c", spec.command],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                    cwd=workdir,
                    close_fds=True,
                )
            finally:
                os.close(out)
        except OSError as exc:
            raise LaunchError(f"cannot start the worker: {exc}") from exc
        worker = _Process(
            pod_id=spec.pod_id,
            attempt=spec.attempt,
            gpu_indices=spec.gpu_indices,
            gpu_uuids=spec.gpu_uuids,
            pid=proc.pid,
            workdir=workdir,
            lines=SourceLines(spec.pod_id, self._on_line),
            proc=proc,
            session=proc.pid,
            started=sessions.start_ticks(proc.pid),
        )
        _write_wrapper_file(workdir, worker.session, worker.started)
        if spec.image:
            log.info("pod %s: process runtime ignores image %s", spec.pod_id, spec.image)
            worker.lines.agent(
                f"[agent] process runtime: image {spec.image!r} is ignored; "
                "the command runs directly on this host"
            )
        self._start(worker)

    def _start(self, worker: _Process) -> None:
        self._add(worker)
        reader = threading.Thread(
            target=self._read, args=(worker,), name=f"pod-{worker.pod_id}-out", daemon=True
        )
        reader.start()
        threading.Thread(
            target=self._wait, args=(worker, reader), name=f"pod-{worker.pod_id}-wait", daemon=True
        ).start()

    def _read(self, worker: _Process) -> None:
        """Tail the output file until the worker has exited and every byte is read."""
        splitter = LineSplitter(worker.lines)
        try:
            with open(worker.workdir / OUTPUT, "rb") as f:
                while True:
                    data = f.read(65536)
                    if data:
                        splitter.feed(data)
                    elif worker.output_end.is_set():
                        while data := f.read(65536):
                            splitter.feed(data)
                        break
                    else:
                        worker.output_end.wait(POLL)
            splitter.finish()
        except OSError as exc:
            log.warning("pod %s: reading output failed: %s", worker.pod_id, exc)

    def _wait(self, worker: _Process, reader: threading.Thread) -> None:
        if worker.proc is not None:
            with contextlib.suppress(ChildProcessError):  # reaped elsewhere: wait() copes
                os.waitid(os.P_PID, worker.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        else:
            _wait_pidfd(worker.pid)
        with worker.lock:
            worker.leader_exited = True  # from now on the session is killed, not signalled
            for timer in worker.timers:
                timer.cancel()
        # Whatever the wrapper left running dies with it, as in a container: the whole
        # session and whatever carries the marker, seen gone before the exit is reported.
        leftovers = self._kill_worker(worker)
        returncode = worker.proc.wait() if worker.proc is not None else None
        worker.output_end.set()
        reader.join()  # a file read to its end: every line is passed on before the exit
        code, fenced = _read_exit_code(worker.workdir)
        if code is None and returncode is not None:
            code = normalize_exit_code(returncode)
        elif code is None and worker.killed:
            code = 137
        error = ""
        if code is None:
            error = "the worker ended without an exit status (killed?)"
            if leftovers:
                error += f"; its {leftovers} remaining processes were killed"
        elif fenced:
            error = f"{worker.lines.error_tail()}\n{FENCED}".lstrip()
        elif code != 0:
            error = worker.lines.error_tail()
        self._finish(worker, code, error)

    def _kill_worker(self, worker: _Process) -> int:
        marker = f"{WORKER_MARKER}={worker.pod_id}.{worker.attempt}".encode()
        home = f"{HOME_MARKER}={self.home}".encode()
        killed = sessions.kill_worker(worker.session, worker.started, home, {marker})
        if killed:
            log.warning(
                "pod %s: killed %d processes its wrapper left running", worker.pod_id, killed
            )
        return killed

    # --- the shared table's hooks (base.WorkerTable) ---

    def _signal(self, worker: _Process, sig: signal.Signals) -> None:
        worker.signal_group(sig)

    def _has_exited(self, worker: _Process) -> bool:
        return worker.leader_exited

    def _release(self, worker: _Process) -> None:
        # Shipped and reported: nothing to adopt any more.
        for name in (OUTPUT, EXIT_FILE, WRAPPER_FILE):
            (worker.workdir / name).unlink(missing_ok=True)

    # --- after an agent restart ---

    def _marked_wrappers(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """marker → (pid, GPU UUIDs) of each live wrapper of this work root (session leader
        whose environment carries our home and a worker marker)."""
        home = f"{HOME_MARKER}={self.home}".encode()
        prefix = f"{WORKER_MARKER}=".encode()
        gpus_var = b"CUDA_VISIBLE_DEVICES="
        found: dict[str, tuple[int, tuple[str, ...]]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            stat = sessions.proc_stat(pid)
            if home not in environ or self.wrapper.encode() not in cmdline or stat is None:
                continue
            if stat[0] == "Z" or int(stat[3]) != pid:  # dead, or not the session leader
                continue
            gpus = next((v[len(gpus_var) :] for v in environ if v.startswith(gpus_var)), b"")
            named = gpus.decode(errors="replace").split(",")
            uuids = tuple(u for u in named if u.startswith("GPU-"))
            for var in environ:
                if var.startswith(prefix):
                    found[var[len(prefix) :].decode()] = (pid, uuids)
        return found

    def adopt(
        self, skip: Mapping[int, int], prepare: Callable[[int, int], None] | None = None
    ) -> dict[int, int]:
        live = self._marked_wrappers() if Path("/proc").is_dir() else {}
        adopted: dict[int, int] = {}
        if not self.work_root.is_dir():
            return adopted
        for workdir in sorted(self.work_root.iterdir()):
            match = _WORKDIR.match(workdir.name)
            if not match or not (workdir / OUTPUT).exists():
                continue
            pod_id, attempt = int(match[1]), int(match[2])
            if self.has(pod_id):
                continue
            pid, uuids = live.get(f"{pod_id}.{attempt}", (0, ()))
            session, started = _read_wrapper_file(workdir)
            worker = _Process(
                pod_id=pod_id,
                attempt=attempt,
                gpu_indices=(),
                gpu_uuids=uuids,
                pid=pid,
                workdir=workdir,
                lines=SourceLines(pod_id, self._on_line, skip.get(pod_id, 0)),
                session=pid or session,
                started=sessions.start_ticks(pid) if pid else started,
            )
            if not pid:
                worker.leader_exited = True  # ended while no agent was watching
            if prepare is not None:
                prepare(pod_id, attempt)
            self._start(worker)
            adopted[pod_id] = attempt
            log.info("adopted pod %s attempt %s (pid %s)", pod_id, attempt, pid or "exited")
        return adopted

    def kill_leftovers(self, markers: set[str]) -> int:
        """SIGKILL processes that carry one of these worker markers in their environment:
        workers of a previous agent run that could not be adopted; returns once they are
        gone. Linux only."""
        if not markers or not Path("/proc").is_dir():
            return 0
        wanted = {f"{WORKER_MARKER}={m}".encode() for m in markers}
        return sessions.kill_worker(0, None, f"{HOME_MARKER}={self.home}".encode(), wanted)


def _write_wrapper_file(workdir: Path, pid: int, started: int | None) -> None:
    with contextlib.suppress(OSError):  # without it, adoption finds leftovers by marker only
        (workdir / WRAPPER_FILE).write_text(f"{pid} {started if started is not None else ''}\n")


def _read_wrapper_file(workdir: Path) -> tuple[int, int | None]:
    try:
        words = (workdir / WRAPPER_FILE).read_text().split()
        return int(words[0]), int(words[1]) if len(words) > 1 else None
    except (OSError, ValueError, IndexError):
        return 0, None


def _wait_pidfd(pid: int) -> None:
    """Block until a process that is not our child exits."""
    if not pid:
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)
