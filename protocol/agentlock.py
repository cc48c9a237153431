"""The node agent's state-dir lock (`agent.lock`), read by the agent and by the embedded
console that starts one (docs/processes.md): one agent per state dir, its pid in the file."""

import fcntl
import os
from pathlib import Path

LOCK_NAME = "agent.lock"


def lock_holder(state_dir: Path) -> int | None:
    """The pid of the agent holding the state dir's lock (0 when it wrote none), or None
    when the lock is free."""
    try:
        fd = os.open(Path(state_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = f.read().strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(f, fcntl.LOCK_UN)
        return None
