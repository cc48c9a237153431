"""A process worker's whole session, found and killed through /proc (Linux).

Every process worker is a session of its own: the fence wrapper is its leader, and whatever
the worker starts inherits the session id, even in process groups of its own (a shell with
job control). A session id names no one else while a member lives (the kernel keeps the
number reserved), so after the wrapper is gone every live process with that session id is
still part of the worker, unless the number was reused: then a process with that pid
exists and started later than the wrapper did, and there is nothing of ours left to find.

A worker that left its session (`setsid`) still carries its marker in its environment
(agents.node.runtimes.base.WORKER_MARKER); those are found by marker.
"""

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

KILL_TIMEOUT = 10.0  # a process in uninterruptible sleep can take a moment to die
_POLL = 0.01


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, session,
    …, starttime at index 19]; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot): a pid with another start time
    is another process."""
    stat = proc_stat(pid)
    return int(stat[19]) if stat is not None and len(stat) > 19 else None


def _pids() -> list[int]:
    try:
        return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []


def members(sid: int, started: int | None) -> list[int]:
    """Live (not zombie) processes of session `sid` whose leader started at `started`."""
    if sid <= 0:
        return []
    leader = start_ticks(sid)
    if leader is not None and started is not None and leader != started:
        return []  # the number was reused: our session is empty
    found = []
    for pid in _pids():
        stat = proc_stat(pid)
        if stat is not None and stat[0] not in ("Z", "X") and int(stat[3]) == sid:
            found.append(pid)
    return found


def marked(home: bytes, markers: set[bytes]) -> list[int]:
    """Live processes whose environment carries `home` and one of `markers`."""
    me = os.getpid()
    found = []
    for pid in _pids():
        if pid == me:
            continue
        try:
            environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        except OSError:
            continue  # gone, or not ours to read
        stat = proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        if home in environ and markers.intersection(environ):
            found.append(pid)
    return found


def kill_worker(
    sid: int, started: int | None, home: bytes, markers: set[bytes], timeout: float = KILL_TIMEOUT
) -> int:
    """SIGKILL every live process of the session and every one carrying a marker, again
    until none is left (what they fork meanwhile too). Returns how many were killed; logs
    an error if some were still alive at the timeout."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        alive = set(members(sid, started)) | set(marked(home, markers) if markers else ())
        if not alive:
            return len(killed)
        if time.monotonic() >= deadline:
            log.error("session %s: processes %s survive SIGKILL", sid, sorted(alive))
            return len(killed)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= alive
        time.sleep(_POLL)
