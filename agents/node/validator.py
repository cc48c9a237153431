"""The result's validator command (docs/results.md, "The validator"): run by the agent of
rank 0 after its program exited 0 and its units were promoted, on the run's result folder.

Process runtime: the command runs through `/bin/sh -c` in its own session with the
worker's environment and `RESULT_DIR` (also its working folder) set to the result folder,
which is made read-only (write bits off, files and folders) while it runs and given back
its modes after (the owner's write bit on). It may run limits.RESULT_VALIDATOR_SECONDS;
past that its session is killed and the outcome has no exit code. Its last lines
(limits.RESULT_VALIDATOR_LINES, at most limits.RESULT_VALIDATOR_OUTPUT characters) are its
report. It runs beside the
heartbeat (polled, never waited for): the worker is reported running until it ends.
"""

import contextlib
import os
import signal
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol import limits
from protocol.agent import ValidatorReport

NOT_RUN_HERE = "the {runtime} runtime does not run validators (docs/results.md)"
_PRIVATE_ENV_PREFIXES = ("GPU_AGENT_",)


@dataclass
class Validation:
    proc: subprocess.Popen
    started: float
    output: Path
    result_dir: Path
    modes: dict[Path, int] = field(default_factory=dict)


def not_run(why: str) -> ValidatorReport:
    return ValidatorReport(exit_code=None, output=why)


def _read_only(folder: Path) -> dict[Path, int]:
    """Take the write bits off the result folder's tree; returns the modes to give back."""
    modes: dict[Path, int] = {}
    for path in [folder, *folder.rglob("*")]:
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                continue
            modes[path] = stat.S_IMODE(info.st_mode)
            path.chmod(modes[path] & ~0o222)
    return modes


def _give_back(modes: Mapping[Path, int]) -> None:
    """The modes back, the owner's write bit always on: a validator cut short by an agent
    restart is run again, and that run gives the folder back writable (promote needs it)."""
    for path, mode in modes.items():
        with contextlib.suppress(OSError):
            path.chmod(mode | 0o200)


def start(command: str, env: Mapping[str, str], result_dir: Path, output: Path) -> Validation:
    """Start the validator (OSError when it cannot be started; the folder's modes are given
    back then)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE_ENV_PREFIXES)}
    full = {**base, **env, "RESULT_DIR": str(result_dir)}
    output.parent.mkdir(parents=True, exist_ok=True)
    modes = _read_only(result_dir)
    try:
        with open(output, "wb") as out:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=full,
                cwd=result_dir,
                close_fds=True,
            )
    except OSError:
        _give_back(modes)
        raise
    return Validation(proc, time.monotonic(), output, result_dir, modes)


def poll(validation: Any, now: float | None = None) -> ValidatorReport | None:
    """The outcome once the validator ended (killed past its time limit), else None. A
    container's (agents.node.validator_container) polls itself."""
    if not isinstance(validation, Validation):
        return validation.poll(now)
    now = time.monotonic() if now is None else now
    code = validation.proc.poll()
    timed_out = code is None and now - validation.started > limits.RESULT_VALIDATOR_SECONDS
    if code is None and not timed_out:
        return None
    if timed_out:
        with contextlib.suppress(OSError):
            os.killpg(validation.proc.pid, signal.SIGKILL)
        validation.proc.wait()
    _give_back(validation.modes)
    tail = last_lines(validation.output)
    if timed_out:
        seconds = limits.RESULT_VALIDATOR_SECONDS
        return not_run(f"{tail}\ntimed out after {seconds} s".strip())
    return ValidatorReport(exit_code=max(-1024, min(1024, code)), output=tail)


def last_lines(path: Path) -> str:
    """The last lines of the validator's output, bounded."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return last_lines_of(text)


def last_lines_of(text: str) -> str:
    """The last limits.RESULT_VALIDATOR_LINES lines, at most RESULT_VALIDATOR_OUTPUT long."""
    lines = text.rstrip("\n").splitlines()[-limits.RESULT_VALIDATOR_LINES :]
    return "\n".join(lines)[-limits.RESULT_VALIDATOR_OUTPUT :]
