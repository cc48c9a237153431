"""The production stack carried to a bare machine (scripts/portable-stack, README "The
production stack on a bare machine"), as the fleet's large sizes ran: the bundle's own
PostgreSQL and Redis started by `up` on ports of their own, a Python with none of the
project's packages (the wheels come from the bundle), `manage.py check`, a small fleet over
the real protocol through gunicorn and Celery, then `down`.

`make test-portable` (PORTABLE_TEST=1, PORTABLE_BUNDLE=the tarball it packs, cached) runs it.
"""

import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "scripts" / "portable-stack"
BUNDLE = os.environ.get("PORTABLE_BUNDLE", "")

pytestmark = pytest.mark.skipif(
    os.environ.get("PORTABLE_TEST") != "1" or not BUNDLE,
    reason="make test-portable runs it (PORTABLE_TEST=1, PORTABLE_BUNDLE)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bare_python() -> str:
    """A Python >= 3.12 without the project's packages (the bundle must bring them)."""
    path = subprocess.run(
        [str(ROOT / "scripts" / "find-python")], capture_output=True, text=True, check=True
    ).stdout.strip()
    has_django = subprocess.run([path, "-c", "import django"], capture_output=True).returncode
    if has_django == 0:
        pytest.skip(f"{path} has Django installed: not a bare machine's Python")
    return path


def _exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        assert line.startswith("export "), f"up printed more than exports: {line!r}"
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0] if value else ""
    return env


@pytest.fixture
def stack():
    py = _bare_python()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "DATABASE_URL"}}
    env["PY"] = py
    # Not under pytest's tmp_path: its folders are closed to others, and PostgreSQL runs
    # as nobody.
    work = Path(tempfile.mkdtemp(prefix="portable-stack-"))
    work.chmod(0o755)
    up = subprocess.run(
        [str(STACK), "up", BUNDLE, "--work", str(work),
         "--pg-port", str(_free_port()), "--redis-port", str(_free_port())],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr[-3000:]
    exports = _exports(up.stdout)
    yield py, env | exports, work
    down = subprocess.run([str(STACK), "down", str(work)], capture_output=True, text=True, env=env)
    shutil.rmtree(work, ignore_errors=True)
    assert down.returncode == 0, down.stderr[-2000:]


def test_the_bundle_carries_every_library_it_needs():
    check = subprocess.run([str(STACK), "check", BUNDLE], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


def test_a_fleet_runs_on_the_carried_stack(stack):
    py, env, work = stack
    for var in ("BENCH_PG", "BENCH_FLEET_REDIS_URL", "PYTHONPATH"):
        assert env.get(var), f"up did not export {var}"
    check = subprocess.run(
        [py, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr[-2000:]
    fleet = subprocess.run(
        [py, "-m", "bench.fleet", "--nodes", "5", "--jobs", "20", "--duration", "8",
         "--web-workers", "1", "--procs", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert fleet.returncode == 0, fleet.stdout[-3000:] + fleet.stderr[-3000:]
    line = next(ln for ln in fleet.stdout.splitlines() if ln.startswith("BENCH_JSON "))
    (row,) = json.loads(line.removeprefix("BENCH_JSON "))["rows"]
    assert row["agents"] == 5 and row["not_ready"] == 0 and row["hb_failed"] == 0
    assert row["cycles"] > 0 and row["cycle_mean_ms"] > 0  # each cycle counted itself
    assert row["probes"] > 0 and row["probes_not_running"] == 0
    # The bundle's servers, not the machine's: PostgreSQL runs as nobody from the bundle.
    pid = (work / "pgdata" / "postmaster.pid").read_text().split()[0]
    assert Path(f"/proc/{pid}/exe").resolve().is_relative_to(work.resolve())
