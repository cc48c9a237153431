"""A throwaway console for the scripts that drive the real one from outside
(`scripts/api_conformance.py`, `scripts/faults/db_backend_kill.py`): its environment, its
management commands, a free port, waiting for it, and stopping it. Each script adds what it
needs of its own (a database, settings, its load)."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]


def console_env(var_dir: Path, *, without: Iterable[str] = (), **settings: str) -> dict[str, str]:
    """This process's environment for a console of its own in `var_dir`: development
    settings, the API's rate limits raised, one-second scheduling and heartbeats, `settings`
    on top; the caller's Redis, loops, settings module and `without` left out."""
    dropped = {"DJANGO_SETTINGS_MODULE", "REDIS_URL", "CONSOLE_LOOPS", *without}
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env.update(
        CONSOLE_ENV="development",
        CONSOLE_VAR_DIR=str(var_dir),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        PYTHONUNBUFFERED="1",
        # Thousands of requests a minute from one token and one address, some without it.
        API_RATE_LIMIT="1000000/60",
        API_AUTH_FAILURES_PER_ADDRESS="1000000/60",
        SCHEDULER_INTERVAL="1",
        AGENT_HEARTBEAT_INTERVAL="1",
    )
    env.update(settings)
    return env


def manage(env: dict[str, str], *args: str) -> str:
    """`manage.py args` with this interpreter; its output, or the script ends with it."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        sys.exit(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(
    what: str, check: Callable[[], bool], process: subprocess.Popen, timeout: float
) -> None:
    """Poll `check` every 0.5 s until it holds; the script ends when `process` (the
    console) ends first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the console ended before {what}")
        try:
            if check():
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    sys.exit(f"timed out waiting for {what}")


def stop(process: subprocess.Popen | None, timeout: float) -> None:
    """Ctrl-C, as a person stops it; its whole process group killed after `timeout`."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
