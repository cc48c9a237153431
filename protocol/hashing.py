"""Hashing the data folders' content into the run's manifest (docs/results.md, "Run
identity"; a job's `result_inputs_sha256`): the walk and the hash of every file, with its
bounds (protocol.limits.INPUT_SHA256_*), progress lines and a cache of what was hashed.
Shared by the node agent (agents.node.hashing, on its node) and the console's Kubernetes
controller (kube.hashing, on its mount of the shared checkpoint volume); each runs it in a
thread of its own, never in its loop. Django-free."""

import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol import limits
from protocol.inputs import (
    InputFile,
    content_facts,
    content_files,
    file_sha256,
    gb,
    link_sha256,
    manifest,
    not_hashed,
)
from protocol.outputs import OutputPaths
from protocol.units import RunFacts

log = logging.getLogger(__name__)

CACHE_ENTRIES = 200_000  # files remembered, the most recently hashed or found
PROGRESS_EVERY = 30.0  # seconds between the log's progress lines while hashing


class Cancelled(Exception):
    """The worker was stopped, or its hasher is shutting down, while its inputs were hashed."""


def manifest_file(paths: OutputPaths) -> Path:
    """Where an attempt's manifest is kept: `attempt-N.inputs.sha256` beside its
    ACCEPTED_UNITS_FILE (`attempt-N.accepted.json`), with the run, never promoted."""
    return paths.staging.with_name(f"{paths.staging.name}.inputs.sha256")


class HashCache:
    """path → (size, mtime_ns, inode, ctime_ns, sha256), in a private file (None: kept in
    memory only). Used by one hashing thread only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._files: dict[str, list] | None = None
        self._dirty = False

    def _loaded(self) -> dict[str, list]:
        if self._files is None:
            self._files = {}
            if self.path is not None:
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    self._files = dict(json.loads(self.path.read_text())["files"])
        return self._files

    def get(self, entry: InputFile) -> str | None:
        files = self._loaded()
        known = files.pop(str(entry.path), None)
        if known is None or tuple(known[:4]) != entry.key:
            return None
        files[str(entry.path)] = known  # the most recently used last: kept longest
        return known[4]

    def put(self, entry: InputFile, sha256: str) -> None:
        self._loaded()[str(entry.path)] = [*entry.key, sha256]
        self._dirty = True

    def save(self) -> None:
        if not self._dirty or self._files is None:
            return
        kept = dict(list(self._files.items())[-CACHE_ENTRIES:])
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps({"files": kept}).encode(), mode=0o600)
        self._files, self._dirty = kept, False


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


@dataclass
class _Clock:
    """The time bound and the log's progress lines of one hash."""

    say: Callable[[str], None]
    cancelled: threading.Event
    total: int
    max_seconds: float
    now: Callable[[], float]
    done: int = 0
    started: float = 0.0
    said: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.said = self.now()

    def block(self, size: int) -> None:
        self.done += size
        self.check()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled
        now = self.now()
        if now - self.started > self.max_seconds:
            raise TimeoutError(
                f"not done after {self.max_seconds:,.0f} s ({gb(self.done)} of "
                f"{gb(self.total)} hashed)"
            )
        if now - self.said >= PROGRESS_EVERY:
            self.said = now
            self.say(f"hashing inputs: {gb(self.done)} of {gb(self.total)} hashed")


def hash_inputs(
    folders: Mapping[str, str],
    manifest_path: Path,
    *,
    cache: HashCache,
    say: Callable[[str], None],
    cancelled: threading.Event,
    max_files: int = limits.INPUT_SHA256_FILES,
    max_bytes: int = limits.INPUT_SHA256_BYTES,
    max_seconds: float = limits.INPUT_SHA256_SECONDS,
    now: Callable[[], float] = time.monotonic,
) -> tuple[RunFacts, str]:
    """The folders' content facts and the log's last word on them; empty facts when a bound
    was passed or a file could not be read. Writes the manifest; raises Cancelled."""
    files, note = content_files(folders, max_files, max_bytes)
    if note:
        return RunFacts(), note
    total = sum(f.size for f in files)
    say(f"hashing inputs: {files_noun(len(files))}, {gb(total)}")
    clock = _Clock(say, cancelled, total, max_seconds, now)
    hashed: list[tuple[str, str]] = []
    try:
        for entry in files:
            clock.check()
            digest = link_sha256(entry.target) if entry.target else cache.get(entry)
            if digest is None:
                digest = file_sha256(entry.path, clock.block)
                cache.put(entry, digest)
            else:
                clock.done += entry.size
            hashed.append((entry.shown, digest))
    except TimeoutError as exc:
        return RunFacts(), not_hashed(str(exc))
    except OSError as exc:
        return RunFacts(), not_hashed(f"cannot read {entry.shown}: {exc.strerror or exc}")
    finally:
        with contextlib.suppress(OSError):
            cache.save()
    text = manifest(hashed)
    facts = content_facts(text, files)
    try:
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(manifest_path, text)
        kept = f"manifest {manifest_path}"
    except OSError as exc:
        kept = f"manifest not written: {exc}"
    seconds = now() - clock.started
    return facts, (
        f"inputs hashed: {files_noun(len(files))}, {gb(total)} in {seconds:,.0f} s; content "
        f"sha256 {facts.inputs_sha256[:12]}…, {kept}"
    )


def files_noun(count: int) -> str:
    return f"{count:,} file{'' if count == 1 else 's'}"


# -- the hashing thread ---------------------------------------------------------------------


@dataclass(kw_only=True)
class HashRequest:
    """One worker's data folders to hash into its manifest; `say` writes where its user
    reads (the worker's log on a node, the controller's log on Kubernetes)."""

    folders: dict[str, str]
    manifest: Path
    say: Callable[[str], None]
    cancel: threading.Event = field(default_factory=threading.Event)
    content: RunFacts | None = None  # once hashed (empty: not hashed, the log says why)


class HashThread:
    """One thread hashing requests one at a time, started at the first (the ranks of a job
    read the same folders: the second finds every file in the cache); `done()` after
    each. Its owner (agents.node.hashing, kube.hashing) keeps which worker waits for
    which request."""

    def __init__(self, cache: HashCache, done: Callable[[], None], *, who: str) -> None:
        self.cache, self._done, self._who = cache, done, who
        self.bounds: dict[str, Any] = {
            "max_files": limits.INPUT_SHA256_FILES,
            "max_bytes": limits.INPUT_SHA256_BYTES,
            "max_seconds": limits.INPUT_SHA256_SECONDS,
        }
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[HashRequest | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, request: HashRequest) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hashing", daemon=True)
                self._thread.start()
        self._queue.put(request)

    def stop(self) -> None:
        """The thread ends after the request it hashes (its owner cancels that one)."""
        self._queue.put(None)

    def _run(self) -> None:
        while (request := self._queue.get()) is not None:
            if request.cancel.is_set():
                continue
            try:
                content, note = hash_inputs(
                    request.folders, request.manifest, cache=self.cache, say=request.say,
                    cancelled=request.cancel, **self.bounds,
                )  # fmt: skip
            except Cancelled:
                continue
            except Exception as exc:  # a bug must not leave the worker waiting for good
                log.exception("hashing %s failed", request.manifest)
                content, note = RunFacts(), not_hashed(f"the {self._who} failed: {exc}")
            request.say(note)
            request.content = content
            self._done()
