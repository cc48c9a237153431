"""The agent's state dir: its registration and the pods it has launched.

`node.json` holds the node id and token (mode 0600); `registering.json` the key of a
registration not yet answered (kept across restarts, so an attempt repeated after a lost
reply carries the same key; removed once `node.json` is written). Those are replaced
atomically.

The ledger of launched pods is two files, so that a launch or an exit does not rewrite the
last KEEP_FINISHED finished pods (400 KB, ~10 ms of the agent's serial loop each time):
- `workers.json`: every pod not finished (launched, running, exited but not yet reported),
  written *before* a launch, so that no crash or restart can lead to a pod being launched
  twice (docs/traps.md, "duplicate workers"); replaced atomically, small.
- `finished.jsonl`: a pod whose exit the console took, one line each, appended (and
  synced) *before* `workers.json` is rewritten without it; rewritten with only the kept
  ones once it holds twice as many lines.
Loading reads the finished lines, then `workers.json` over them: a pod in both (a crash
between the two writes, or a finished pod the console listed again) is unfinished, so its
exit is reported again, which the console takes as often as it comes. A pod is never in
neither. Only the last line can be torn (a crash, a full disk mid-append): it is skipped,
since the pod is still in `workers.json`; a bad line before it is refused like a bad
`workers.json`.
"""

import contextlib
import fcntl
import json
import os
import secrets
from dataclasses import dataclass, fields
from pathlib import Path

from protocol.agentlock import LOCK_NAME, lock_holder  # noqa: F401 (the agent's lock)

KEEP_FINISHED = 1000  # finished pod ids remembered (never launched again)
# finished.jsonl is rewritten with the kept pods once it holds this many lines per kept pod.
FINISHED_LOG_SLACK = 2


class AgentConfigError(Exception):
    """The agent cannot start as configured (exit status 2)."""


@dataclass
class LaunchRecord:
    attempt: int
    finished: bool = False  # its exit has been reported to the console
    # Why it ended, when the worker's own exit code does not tell (never launched, launch
    # failed, stopped because the agent shut down, vanished with a previous agent run).
    error: str = ""
    # The exit as reported, kept so it can be reported again if the console still lists
    # the pod (it did not manage to apply the report): {"exit_code", "error", "container_id"}.
    final: dict | None = None
    # Where the worker writes progress and checkpoints (agents.sdk), so a restarted agent
    # that adopts the worker keeps reporting them.
    progress_file: str = ""
    checkpoint_dir: str = ""
    output_dir: str = ""  # its staging folder (OUTPUT_DIR, docs/results.md)
    result_dir: str = ""  # its result folder, when the job declared one (docs/results.md)
    # Why its reports are sent without details (progress, checkpoints, GPU use, error
    # text): the console refused them limits.REFUSALS_BEFORE_SET_ASIDE times in a row.
    set_aside: str = ""
    # Who ended it when its own exit does not tell (`WorkerReport.ended_by`): "agent_shutdown"
    # when the agent stopped it because the agent was shutting down.
    ended_by: str = ""
    # The result's validator (docs/results.md), rank 0 only: its command, the worker's
    # environment for it (private file, like the rest), and its outcome once it ended
    # ({"exit_code", "output"}), reported with the exit.
    validator: str = ""
    validator_env: dict | None = None
    validation: dict | None = None
    validator_image: str = ""  # the docker runtime runs it in the job's image
    # Its data folders' content is being hashed before its launch (agents.node.hashing):
    # not launched yet, not reported; an agent restarted meanwhile starts it again.
    preparing: bool = False


def _write_private(path: Path, payload: dict) -> None:
    """Atomically replace `path` with JSON readable only by the agent's user."""
    # dumps, not dump: dump encodes in pure Python, piece by piece (json.encoder), ~20x
    # slower, and workers.json is written on every launch and exit.
    _replace_private(path, json.dumps(payload).encode())


def _replace_private(path: Path, data: bytes) -> None:
    """Atomically replace `path` with `data` (synced), readable only by the agent's user."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # disk full, read-only: leave no empty temp file
            tmp.unlink(missing_ok=True)
        raise


def _forget_oldest_finished(launched: dict[int, LaunchRecord]) -> None:
    finished = [k for k, r in launched.items() if r.finished]
    for pod_id in finished[: max(0, len(finished) - KEEP_FINISHED)]:
        del launched[pod_id]


def _append_synced(path: Path, lines: list[bytes]) -> None:
    """Append whole lines and sync them; a failed append (a full disk) is cut off again,
    so that no torn line is left for a later append to follow."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = os.fstat(fd).st_size
        try:
            data = memoryview(b"".join(lines))
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


class StateStore:
    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.identity_path = self.dir / "node.json"
        self.registering_path = self.dir / "registering.json"
        self.workers_path = self.dir / "workers.json"
        self.finished_path = self.dir / "finished.jsonl"
        self._lock_file = None
        self._logged: set[int] = set()  # pods whose finished record is in finished.jsonl
        self._log_lines = 0  # lines in finished.jsonl

    def lock(self) -> None:
        """One agent per state dir: two would both launch every desired worker. The holder
        writes its pid into the lock file (`lock_holder`)."""
        fd = os.open(self.dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)  # not truncated
        f = os.fdopen(fd, "r+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise AgentConfigError(f"another agent is running with state dir {self.dir}") from None
        with contextlib.suppress(OSError):
            f.truncate(0)
            f.write(f"{os.getpid()}\n")
            f.flush()
        self._lock_file = f

    def unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file releases the lock
            self._lock_file = None

    def load_identity(self) -> dict | None:
        try:
            data = json.loads(self.identity_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise AgentConfigError(f"cannot read {self.identity_path}: {exc}") from exc
        return data if isinstance(data, dict) and data.get("node_token") else None

    def save_identity(self, identity: dict) -> None:
        _write_private(self.identity_path, identity)
        self.registering_path.unlink(missing_ok=True)

    def registration_key(self, server: str, name: str) -> str:
        """The key of this node's registration at `server` as `name`: the one saved by an
        earlier attempt, else a new one, saved before it is sent (docs/agent-protocol.md,
        "A registration repeated")."""
        with contextlib.suppress(OSError, ValueError):
            saved = json.loads(self.registering_path.read_text())
            if saved.get("server") == server and saved.get("name") == name and saved.get("key"):
                return saved["key"]
        key = secrets.token_urlsafe(32)
        _write_private(self.registering_path, {"server": server, "name": name, "key": key})
        return key

    def load_launched(self) -> dict[int, LaunchRecord]:
        finished = self._load_finished()
        try:
            data = json.loads(self.workers_path.read_text())
            live = {int(k): LaunchRecord(**v) for k, v in data["launched"].items()}
        except FileNotFoundError:
            live = {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Refuse to guess: an unreadable record could mean launching a worker twice.
            raise AgentConfigError(f"cannot read {self.workers_path}: {exc}") from exc
        launched = finished | live  # a pod in both is unfinished (workers.json is later)
        _forget_oldest_finished(launched)
        self._logged = {pod_id for pod_id, r in launched.items() if r.finished} - set(live)
        return launched

    def _load_finished(self) -> dict[int, LaunchRecord]:
        try:
            lines = self.finished_path.read_bytes().splitlines()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise AgentConfigError(f"cannot read {self.finished_path}: {exc}") from exc
        finished: dict[int, LaunchRecord] = {}
        for number, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
                pod_id = int(entry.pop("pod_id"))
                finished.pop(pod_id, None)  # the later line wins, in its place
                finished[pod_id] = LaunchRecord(**entry)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                if number == len(lines):  # torn by a crash: that pod is in workers.json
                    break
                raise AgentConfigError(f"cannot read {self.finished_path}: {exc}") from exc
        self._log_lines = len(lines)
        return finished

    def save_launched(self, launched: dict[int, LaunchRecord]) -> None:
        """Newly finished pods are appended to finished.jsonl, then workers.json is
        rewritten with the pods not finished (see the module's docstring for why)."""
        _forget_oldest_finished(launched)
        self._logged.intersection_update(k for k, r in launched.items() if r.finished)
        new = [k for k, r in launched.items() if r.finished and k not in self._logged]
        if self._log_lines + len(new) > FINISHED_LOG_SLACK * KEEP_FINISHED:
            kept = [k for k, r in launched.items() if r.finished]
            _replace_private(self.finished_path, b"".join(_line(k, launched[k]) for k in kept))
            self._log_lines = len(kept)
            self._logged = set(kept)
        elif new:
            _append_synced(self.finished_path, [_line(k, launched[k]) for k in new])
            self._log_lines += len(new)
            self._logged.update(new)
        _write_private(
            self.workers_path,
            {"launched": {str(k): _plain(r) for k, r in launched.items() if not r.finished}},
        )


_FIELDS = tuple(f.name for f in fields(LaunchRecord))


def _plain(record: LaunchRecord) -> dict:
    """The record as JSON-ready fields (`dataclasses.asdict` deep-copies: far slower)."""
    return {name: getattr(record, name) for name in _FIELDS}


def _line(pod_id: int, record: LaunchRecord) -> bytes:
    return json.dumps({"pod_id": pod_id, **_plain(record)}).encode() + b"\n"
