"""End-to-end fixtures: the real `manage.py run_console` (web server, scheduler and monitor
loops, a local agent with the process runtime and fake GPUs) started as a subprocess on its
own database, driven over HTTP exactly as a user would.

On PostgreSQL (DATABASE_URL set) the console gets a fresh database of its own; otherwise a
SQLite file in a temporary folder.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningConsole:
    url: str
    process: subprocess.Popen
    creds: dict
    var_dir: Path
    log_path: Path
    env: dict[str, str] | None = None  # the console's environment (for manage.py commands)

    def api(self) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.creds['api_token']}"
        return session

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def _postgres_database(base_url: str) -> tuple[str, callable]:
    import psycopg

    name = f"e2e_{uuid.uuid4().hex[:10]}"
    admin_url = base_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return base_url.rsplit("/", 1)[0] + f"/{name}", drop


def console_env(var_dir: Path, database_url: str | None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CONSOLE_LOOPS", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        CONSOLE_ENV="development",
        CONSOLE_VAR_DIR=str(var_dir),
        SCHEDULER_INTERVAL="1",
        MONITOR_INTERVAL="1",
        AGENT_HEARTBEAT_INTERVAL="1",
        DEFAULT_STOP_GRACE="5",
        PYTHONUNBUFFERED="1",
    )
    if database_url:
        env["DATABASE_URL"] = database_url
    return env


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def wait_for(predicate, timeout: float, interval: float = 0.25, message: str = ""):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s: {message} (last: {last!r})")


def print_tail(name: str, path: Path, lines: int = 200) -> None:
    """The last lines of a process's log, printed for a failing test's report."""
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        tail = [f"(unreadable: {exc})"]
    print(f"----- last {len(tail)} lines of the {name} log ({path}) -----")
    print("\n".join(tail))


@contextmanager
def console_database() -> Iterator[str | None]:
    """A database of its own for a console (PostgreSQL when DATABASE_URL is set, dropped
    afterwards); None on SQLite, where the console keeps its file in its var dir."""
    if not os.environ.get("DATABASE_URL"):
        yield None
        return
    database_url, drop = _postgres_database(os.environ["DATABASE_URL"])
    try:
        yield database_url
    finally:
        drop()


@contextmanager
def start_console(var_dir: Path, database_url: str | None = None) -> Iterator[RunningConsole]:
    """Migrate, seed and start `manage.py run_console` on a database of its own, or on
    `database_url` (with the same `var_dir`: a second start of the same console)."""
    drop = None
    if database_url is None and os.environ.get("DATABASE_URL"):
        database_url, drop = _postgres_database(os.environ["DATABASE_URL"])
    env = console_env(var_dir, database_url)
    process = None
    try:
        manage(env, "migrate", "--noinput")
        manage(env, "seed_demo")
        creds = json.loads((var_dir / "demo-credentials.json").read_text())
        port = free_port()
        log_path = var_dir / "console.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "run_console", "--port", str(port)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        console = RunningConsole(f"http://127.0.0.1:{port}", process, creds, var_dir, log_path, env)

        def healthy() -> bool:
            try:
                return requests.get(f"{console.url}/healthz", timeout=2).status_code == 200
            except requests.ConnectionError:
                assert process.poll() is None, console.output()
                return False

        wait_for(healthy, 60, message="console did not come up")
        api = console.api()

        def node_ready() -> bool:
            nodes = api.get(f"{console.url}/api/v1/nodes", timeout=5).json()["nodes"]
            return any(n["state"] == "Ready" for n in nodes)

        wait_for(node_ready, 60, message="local agent did not register")
        try:
            yield console
        except BaseException:
            print_tail("console", log_path)  # pytest shows it with the failure
            raise
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if drop is not None:
            drop()


@pytest.fixture(scope="session")
def running_console(tmp_path_factory) -> Iterator[RunningConsole]:
    with start_console(tmp_path_factory.mktemp("console-var")) as console:
        yield console


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium through Playwright (never `playwright install`)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail("Chromium is required for browser tests (scripts/test-tools installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
