"""Self-fencing (docs/fault-tolerance.md): the lease file the agent renews and the tiny wrapper
that reads it.

`Lease` is written by the agent after each heartbeat the console applied: "EXPIRES GRACE",
CLOCK_BOOTTIME seconds (counted from when that heartbeat was *sent*, so the console, which
times out from its receive time, always times out later) and the SIGTERM→SIGKILL grace.
`fencewrap` (fencewrap.c, a static C program of a few hundred KiB) is every worker's parent,
on the host for the process runtime and inside the container for the docker runtime, where
the folder holding both is bind-mounted read-only. It stops the worker when the lease runs
out, even if the agent is frozen.

The wrapper is built when the agent is installed (`python -m agents.node.fence`, run by
`make venv` and the Dockerfile) into this package's folder; an agent that finds no build, or
one older than the source, builds it into its state dir (a C compiler is then needed).
"""

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("fencewrap.c")
PACKAGED = Path(__file__).with_name("fencewrap")
WRAPPER_NAME = "fencewrap"
LEASE_NAME = "lease"
MOUNT = "/.gpu-fence"  # where the fence folder appears inside a container


class FenceUnavailable(Exception):
    """The wrapper could not be built or found."""


def boottime() -> float:
    """The clock the wrapper reads (counts suspend, shared by containers on the host)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def _stamp(binary: Path) -> Path:
    return binary.with_name(binary.name + ".sha256")


def _current(binary: Path, digest: str) -> bool:
    try:
        return binary.is_file() and _stamp(binary).read_text().strip() == digest
    except OSError:
        return False


def build(dest: Path) -> Path:
    """Compile fencewrap.c into `dest` (statically, so it runs in any container)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise FenceUnavailable("no C compiler (cc) to build the worker fence wrapper")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".build-{os.getpid()}")
    command = [compiler, "-static", "-Os", "-s", "-o", str(tmp), str(SOURCE)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FenceUnavailable(f"cannot build the fence wrapper: {exc}") from exc
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise FenceUnavailable(f"cannot build the fence wrapper: {done.stderr.strip()[-500:]}")
    os.replace(tmp, dest)
    _stamp(dest).write_text(_source_hash() + "\n")
    return dest


def install(folder: Path) -> Path:
    """The wrapper in `folder` (the agent's fence folder), current with the source: copied
    from the packaged build, else built here. Raises FenceUnavailable."""
    digest = _source_hash()
    dest = Path(folder) / WRAPPER_NAME
    if _current(dest, digest):
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    if _current(PACKAGED, digest):
        tmp = dest.with_name(dest.name + f".copy-{os.getpid()}")
        shutil.copy2(PACKAGED, tmp)
        os.replace(tmp, dest)
        _stamp(dest).write_text(digest + "\n")
        return dest
    log.info("building the worker fence wrapper into %s", dest)
    return build(dest)


class Lease:
    """The node's lease file; the wrappers of all its workers read it."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LEASE_NAME

    def renew(self, expires: float, grace: float) -> None:
        """Replace the lease atomically (a rename: a bind-mounted folder shows it)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(f"{expires:.3f} {grace:.3f}\n")
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):  # disk full: leave no empty temp file
                tmp.unlink(missing_ok=True)
            raise

    def unlimited(self) -> None:
        """No fence (a console that grants no lease)."""
        self.renew(0.0, 0.0)

    def read(self) -> tuple[float, float]:
        expires, grace = self.path.read_text().split()
        return float(expires), float(grace)
