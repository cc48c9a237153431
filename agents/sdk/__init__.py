"""The training-job SDK (docs/fault-tolerance.md, docs/results.md): progress, checkpoints and
counted results. Dependency-free.

    from agents.sdk import progress, checkpoint, resume, save_on_sigterm

    start = 0
    restored = resume()                       # None on a fresh start
    if restored:
        start, state = restored
    save_on_sigterm(lambda: checkpoint(step, state))   # opt in: save once more on stop
    for step in range(start + 1, total + 1):
        ...
        progress(step, total, phase="train", loss=loss)
        if step % 100 == 0:
            checkpoint(step, state)

The agent passes `PROGRESS_FILE`, `CHECKPOINT_DIR` and (on a restart) `RESUME_FROM` in the
environment. Outside the console (no variables) every call is a harmless no-op or uses the
current directory, so a script runs the same on a laptop.

Checkpoints (the EasyCkpt idea, framework-neutral): each goes to `<CHECKPOINT_DIR>/step-N/`;
the data files are written and fsynced first, then `manifest.json` (files, sizes, sha256)
is written to a temporary name, fsynced and renamed into place, then the folder is fsynced.
Only a folder with a complete manifest counts: a crash mid-save leaves no manifest, and the
agent and `resume()` ignore it. Old checkpoints are pruned to `keep` (CHECKPOINT_KEEP,
default 3). State: `bytes` are stored as is, a PyTorch object with `torch.save` when torch is
importable and the state is not plain JSON, anything JSON-serialisable as JSON.

Counted results (docs/results.md): write a unit's files into `output_dir()` (OUTPUT_DIR), then
`accept("p3", files=[...], items=500)`; on a resume `accepted()` names the units already
accepted, which the program skips; `phase("write")` says what it is doing;
`stop_requested()` turns true on a stop (SIGTERM), so it can finish the current unit,
accept it and exit.
"""

import contextlib
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
DEFAULT_KEEP = 3


class CheckpointError(Exception):
    """A checkpoint could not be read back (incomplete, or its files do not match)."""


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


# --- progress ------------------------------------------------------------------------------


_LAST = {"step": 0, "total": None, "phase": ""}


def progress(step: int, total: int | None = None, phase: str = "", **metrics: float) -> None:
    """Report the current step (and optional total, phase and numeric metrics). Cheap: one
    small file replaced atomically; the agent reads the newest one at each heartbeat. No
    phase given: the one `phase()` set last."""
    phase = str(phase or _LAST["phase"])[:100]
    _LAST.update(step=int(step), total=total, phase=phase)
    target = os.environ.get("PROGRESS_FILE")
    if not target:
        return
    body = {"step": int(step), "phase": phase, "time": time.time()}
    if total is not None:
        body["total"] = int(total)
    clean = {}
    for key, value in list(metrics.items())[:32]:
        with contextlib.suppress(TypeError, ValueError):
            number = float(value)
            if number == number and abs(number) != float("inf"):
                clean[str(key)[:64]] = number
    body["metrics"] = clean
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, json.dumps(body).encode())


# --- checkpoints ---------------------------------------------------------------------------


def checkpoint_dir() -> Path:
    return Path(os.environ.get("CHECKPOINT_DIR") or "checkpoints")


def _encode(state: Any) -> tuple[str, str, bytes | None]:
    """(format, file name, bytes); bytes None means torch writes the file itself."""
    if isinstance(state, bytes | bytearray | memoryview):
        return "bytes", "state.bin", bytes(state)
    try:
        return "json", "state.json", json.dumps(state).encode()
    except (TypeError, ValueError):
        pass
    try:
        import torch  # noqa: F401  - only when the state is not plain data
    except ImportError as exc:
        raise TypeError(
            "checkpoint state must be bytes or JSON-serialisable (torch is not installed)"
        ) from exc
    return "torch", "state.pt", None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint(step: int, state: Any, *, keep: int | None = None, root: Path | None = None) -> Path:
    """Save `state` as the checkpoint of `step`; returns its folder. Rank 0 saves by
    default (other ranks return without saving unless CHECKPOINT_ALL_RANKS=1)."""
    root = Path(root) if root is not None else checkpoint_dir()
    folder = root / f"step-{int(step)}"
    if os.environ.get("RANK", "0") != "0" and os.environ.get("CHECKPOINT_ALL_RANKS") != "1":
        return folder
    root.mkdir(parents=True, exist_ok=True)
    if folder.exists():  # an earlier save of this step (complete or not) is replaced
        shutil.rmtree(folder)
    folder.mkdir()
    kind, name, data = _encode(state)
    target = folder / name
    if data is None:
        import torch

        torch.save(state, target)
        with open(target, "rb+") as f:
            os.fsync(f.fileno())
    else:
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    manifest = {
        "version": MANIFEST_VERSION,
        "step": int(step),
        # The attempt that saved it: the console ignores checkpoints a stale attempt (a
        # worker already replaced by a restart) leaves behind in the shared folder.
        "attempt": int(os.environ.get("ATTEMPT", "0") or 0),
        "format": kind,
        "created": time.time(),
        "files": [{"name": name, "size": target.stat().st_size, "sha256": _sha256(target)}],
    }
    _write_atomic(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
    _fsync_dir(root)
    prune(root, keep if keep is not None else int(os.environ.get("CHECKPOINT_KEEP", DEFAULT_KEEP)))
    return folder


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a complete checkpoint folder, or None (missing, partial, invalid)."""
    try:
        manifest = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return None
    if not isinstance(manifest.get("step"), int):
        return None
    return manifest


def committed(root: Path | None = None) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest step first."""
    root = Path(root) if root is not None else checkpoint_dir()
    found = []
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            if entry.is_dir() and entry.name.startswith("step-"):
                manifest = read_manifest(entry)
                if manifest is not None:
                    found.append((manifest["step"], entry))
    return sorted(found)


def prune(root: Path, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints; drop older ones and partial folders
    older than the newest complete one. Only this folder's own checkpoints: a partial
    folder holds the files of one save, never a folder (one that does is not ours, e.g.
    another job's folder nested here before submissions refused that)."""
    done = committed(root)
    if not done:
        return
    keep = max(1, keep)
    for _, folder in done[:-keep]:
        shutil.rmtree(folder, ignore_errors=True)
    newest = done[-1][0]
    for entry in Path(root).iterdir():
        if not entry.name.startswith("step-") or read_manifest(entry) is not None:
            continue
        if not _a_partial_save(entry):
            continue
        with contextlib.suppress(ValueError):
            if int(entry.name[5:]) < newest:
                shutil.rmtree(entry, ignore_errors=True)


def _a_partial_save(folder: Path) -> bool:
    """A folder `checkpoint()` left unfinished: plain files only (what one save writes)."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return False
        return not any(e.is_dir() for e in folder.iterdir())
    except OSError:
        return False


def load(folder: Path) -> tuple[int, Any]:
    """(step, state) of a checkpoint folder, verified against its manifest."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise CheckpointError(f"{folder} has no complete manifest")
    entry = manifest["files"][0]
    path = folder / entry["name"]
    if (
        not path.is_file()
        or path.stat().st_size != entry["size"]
        or _sha256(path) != entry["sha256"]
    ):
        raise CheckpointError(f"{path} does not match its manifest")
    kind = manifest.get("format")
    if kind == "bytes":
        return manifest["step"], path.read_bytes()
    if kind == "json":
        return manifest["step"], json.loads(path.read_text())
    import torch

    return manifest["step"], torch.load(path, weights_only=False)


def resume() -> tuple[int, Any] | None:
    """The checkpoint to resume from: RESUME_FROM (set by the console on a restart), else
    None. A RESUME_FROM that cannot be read is an error, not a silent fresh start."""
    folder = os.environ.get("RESUME_FROM")
    if not folder:
        return None
    return load(Path(folder))


# --- save on stop --------------------------------------------------------------------------


def save_on_sigterm(save: Callable[[], object], exit_code: int = 143) -> None:
    """On SIGTERM (stop, preemption, restart) call `save()` once, then exit. The agent's
    grace period (SIGTERM … SIGKILL) bounds how long the save may take."""

    def handler(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt
        try:
            save()
        finally:
            sys.stdout.flush()
            os._exit(exit_code)

    signal.signal(signal.SIGTERM, handler)


# --- counted results (docs/results.md) -----------------------------------------------------

ACCEPTED_FOLDER = ".accepted"
_STOP = {"requested": False, "installed": False}


def phase(name: str) -> None:
    """Say which phase the program is in ("read", "prepare", "compute", "write", "verify"
    or its own); shown with the job's progress."""
    _LAST["phase"] = str(name)[:100]
    progress(_LAST["step"], _LAST["total"], _LAST["phase"])


def output_dir() -> Path:
    """This attempt's staging folder (OUTPUT_DIR; `output` outside the console)."""
    return Path(os.environ.get("OUTPUT_DIR") or "output")


def accept(unit: str, files: list, items: int = 0) -> dict:
    """Accept one whole unit: its files (paths inside `output_dir()`, written completely)
    are fsynced, then `.accepted/<unit>.json` with their sizes and sha256 is written
    atomically. Only then does the unit count; a crash before leaves it unaccepted."""
    root = output_dir()
    entries = []
    for given in files:
        path = Path(given)
        path = path if path.is_absolute() else root / path
        relative = path.resolve().relative_to(root.resolve())  # ValueError outside it
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        entries.append(
            {"path": relative.as_posix(), "size": path.stat().st_size, "sha256": _sha256(path)}
        )
    manifest = {"unit": str(unit), "items": int(items), "files": entries}
    folder = root / ACCEPTED_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / f"{unit}.json", json.dumps(manifest).encode())
    return manifest


def accepted() -> set[str]:
    """The units already accepted: by earlier attempts (ACCEPTED_UNITS_FILE, written by the
    agent when this attempt started) and by this one."""
    done: set[str] = set()
    carried = os.environ.get("ACCEPTED_UNITS_FILE")
    if carried:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            done.update(json.loads(Path(carried).read_text()).get("units", {}))
    with contextlib.suppress(OSError):
        for entry in (output_dir() / ACCEPTED_FOLDER).iterdir():
            name = entry.name
            if name.endswith(".json") or name.endswith(".json.promoted"):
                done.add(name.split(".json")[0])
    return done


def stop_requested() -> bool:
    """Whether a stop (SIGTERM) arrived. The first call installs the handler: call it once
    at start, then between units; on True finish the unit, accept it and exit."""
    if not _STOP["installed"]:
        _STOP["installed"] = True

        def handler(signum, frame) -> None:
            _STOP["requested"] = True

        signal.signal(signal.SIGTERM, handler)
    return _STOP["requested"]
