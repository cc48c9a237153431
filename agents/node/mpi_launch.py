"""How the agent runs an MPI job's worker (docs/distributed.md, "MPI jobs"): through the
exec channel of `agents.node.mpi_exec`, in the role the console gave it (MPI_EXEC_ROLE in
the rendezvous variables). The launcher runs the job's command, passed in
MPI_EXEC_COMMAND; the other workers run only the channel. A container runs the copy in the
fence folder with its own python3."""

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from agents.node import mpi_exec
from agents.node.fence import MOUNT

ROLE_ENV = "MPI_EXEC_ROLE"
COMMAND_ENV = "MPI_EXEC_COMMAND"
FILE_NAME = "mpi_exec.py"
SOURCE = Path(mpi_exec.__file__).resolve()


def role_of(rendezvous: Mapping[str, str]) -> str:
    return rendezvous.get(ROLE_ENV, "")


def wrapped(role: str, runtime: str) -> str:
    """The command the runtime runs for this worker."""
    if runtime == "docker":
        python, path = "python3", f"{MOUNT}/{FILE_NAME}"
    else:
        python, path = sys.executable, str(SOURCE)
    return f"exec {shlex.quote(python)} {shlex.quote(path)} {shlex.quote(role)}"


def install(folder: Path) -> Path:
    """The channel's file in the fence folder (bind-mounted into every container)."""
    dest = folder / FILE_NAME
    if not dest.exists() or dest.read_bytes() != SOURCE.read_bytes():
        tmp = dest.with_name(f"{FILE_NAME}.copy-{os.getpid()}")
        shutil.copyfile(SOURCE, tmp)
        tmp.chmod(0o644)
        os.replace(tmp, dest)
    return dest
