"""`python -I procwrap.py EXIT_FILE -- COMMAND…`: the parent of a process-runtime worker.

It makes a process worker behave like a container whose engine outlives the agent: it runs
COMMAND in its own process group (the agent started this wrapper as a session leader),
writes COMMAND's exit code to EXIT_FILE when it ends, then kills whatever COMMAND left
behind in the group. An agent that restarted after a crash is not the worker's parent and
cannot wait for it, so it reads EXIT_FILE instead.

Signals sent to the group (SIGTERM on stop) are meant for COMMAND: the wrapper only notes
them. Its handlers are Python functions, which the kernel resets to the default on exec, so
COMMAND starts with default signal dispositions.

A stop must leave the grace period to the whole worker, not only to COMMAND's first process:
`/bin/sh -c "python train.py"` dies on SIGTERM at once while python is still saving its
checkpoint. So the wrapper is a child subreaper (orphans of the worker become its children)
and, once stopped, it waits for every descendant to exit before it ends; the agent's SIGKILL
of the group at the end of the grace bounds that wait.
"""

import ctypes
import os
import signal
import subprocess
import sys

_PR_SET_CHILD_SUBREAPER = 36
_stopping = False


def _note_stop(_signum, _frame) -> None:
    global _stopping
    _stopping = True


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init, as before
        pass


def _reap_descendants() -> None:
    """Wait until no child (orphaned grandchildren included) is left."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def write_exit_code(path: str, code: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -I procwrap.py EXIT_FILE -- COMMAND...", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _note_stop)
    _become_subreaper()
    try:
        proc = subprocess.Popen(command, close_fds=True)
    except OSError as exc:
        print(f"[agent] cannot start {command[0]}: {exc}", flush=True)
        write_exit_code(exit_file, 127)
        return 127
    returncode = proc.wait()
    code = 128 - returncode if returncode < 0 else returncode
    if _stopping:
        # Stopped: the rest of the worker still has its grace to finish (save and exit).
        _reap_descendants()
    write_exit_code(exit_file, code)
    sys.stdout.flush()
    # As in a container: what the worker left running dies with it (the wrapper too).
    os.killpg(0, signal.SIGKILL)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
