"""What every benchmark of the suite shares: a clean database of its own, Django set up on
it, a real gunicorn, CPU time read from /proc, and the report format (a table, then one
JSON line that `bench/run.py` collects into `bench/results.json`).

Databases: each benchmark gets `<BENCH_DB_PREFIX><name>` (default prefix `console_bench_`)
on the PostgreSQL server `BENCH_PG` (default postgres://postgres@127.0.0.1:5432), cloned
from a template migrated once per migration set (`<prefix>tpl_<hash>`), and dropped at the
end. The template is dropped by the process that made it (the runner makes it once for all).
"""

import atexit
import contextlib
import hashlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# A benchmark stopped by SIGTERM (the runner's timeout, `timeout`) still drops its databases.
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

PREFIX = os.environ.get("BENCH_DB_PREFIX", "console_bench_")
PG_SERVER = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432").rstrip("/")
JSON_MARK = "BENCH_JSON "
PYTHON = sys.executable


# -- machine and report --------------------------------------------------------------------
def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


def machine() -> dict:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "load_1m_at_start": round(load, 2) if load is not None else None,
        "python": platform.python_version(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
    }


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> None:
    if not rows:
        print("(no rows)")
        return
    columns = list(columns or dict.fromkeys(k for r in rows for k in r))
    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(columns, widths, strict=True))
        )
    )
    for row in cells:
        print(
            "  ".join(
                v.ljust(w) if i == 0 else v.rjust(w)
                for i, (v, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def report(name: str, rows: Sequence[dict], *, quick: bool, notes: str = "", **summary) -> dict:
    """Print the table and the one JSON line; returns what was printed."""
    print_table(rows)
    if notes:
        print(f"note: {notes}")
    payload = {"bench": name, "variant": "quick" if quick else "full", "rows": list(rows)}
    payload |= summary
    if notes:
        payload["notes"] = notes
    print(JSON_MARK + json.dumps(payload, default=str), flush=True)
    return payload


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- databases -------------------------------------------------------------------------------
def _admin(sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def _migrations_hash() -> str:
    digest = hashlib.sha1()
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


def _exists(name: str) -> bool:
    return bool(_admin(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"))


def drop_database(name: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def template() -> str:
    """A database migrated from scratch with this checkout's migrations (made once)."""
    name = os.environ.get("BENCH_TEMPLATE") or f"{PREFIX}tpl_{_migrations_hash()}"
    if _exists(name):
        return name
    building = f"{name}_building"
    drop_database(building)
    _admin(f'CREATE DATABASE "{building}"')
    env = os.environ | {"DATABASE_URL": f"{PG_SERVER}/{building}", "LOG_LEVEL": "WARNING"}
    env.pop("REDIS_URL", None)
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    _admin(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
    if not os.environ.get("BENCH_TEMPLATE"):
        atexit.register(drop_database, name)  # made here: not kept for others
    return name


@contextlib.contextmanager
def clean_database(tag: str) -> Iterator[str]:
    """A fresh, migrated, empty PostgreSQL database; its URL. Dropped afterwards."""
    name = f"{PREFIX}{tag}"
    tpl = template()
    drop_database(name)
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{tpl}"')
    try:
        yield f"{PG_SERVER}/{name}"
    finally:
        drop_database(name)


def bench_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a console process on the benchmark's database: no Redis (the
    loops the benchmark does not start do not run), quiet logs, no rate limit in the way."""
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env |= {
        "DATABASE_URL": database_url,
        "CONSOLE_LOOPS": "inprocess",
        "LOG_LEVEL": "WARNING",
        "LOG_FORMAT": "plain",
        "API_RATE_LIMIT": "100000000/60",
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "ALLOWED_HOSTS": "*",
        # Per-process caches of tokens and rules, as in production (accounts.versions).
        "VERSION_STORE_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14"),
    }
    return env | extra


def setup_django(database_url: str, **extra: str) -> None:
    """Point this process's Django at the benchmark's database and set it up."""
    os.environ.update(bench_env(database_url, **extra))
    import django

    django.setup()


def researcher_with_quota(quota_name: str = "q", gpus: int = 8):
    """A tenant with one workspace and one H200 quota, a member of it and an API token:
    (user, workspace, quota, token). Call after setup_django()."""
    from django.contrib.auth import get_user_model

    from accounts.actions import issue_api_token
    from quotas.models import Membership, Quota, ResourceType, Tenant, Workspace

    tenant = Tenant.objects.create(name="bench")
    workspace = Workspace.objects.create(tenant=tenant, name="bench")
    quota = Quota.objects.create(
        tenant=tenant,
        name=quota_name,
        resource_type=ResourceType.LINGJUN,
        gpu_type="H200",
        gpus=gpus,
    )
    workspace.quotas.add(quota)
    user = get_user_model().objects.create(username="bench")
    Membership.objects.create(workspace=workspace, user=user)
    _, token = issue_api_token(user)
    return user, workspace, quota, token


# -- processes -------------------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its waited-for children (from /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # after the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14)
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK


def children(pid: int) -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(p) for p in (task / "children").read_text().split()]
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all its live descendants."""
    return cpu_seconds(pid) + sum(tree_cpu(c) for c in children(pid))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextlib.contextmanager
def gunicorn(env: dict[str, str], workers: int = 4, threads: int = 4) -> Iterator[tuple[str, int]]:
    """The console under gunicorn (gthread, deploy/gunicorn.conf.py) on a free port; yields
    its base URL and the master's pid (the workers are its children)."""
    port = free_port()
    env = env | {
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(workers),
        "GUNICORN_THREADS": str(threads),
        "GUNICORN_MAX_REQUESTS": "0",  # no recycling in the middle of a measurement
    }
    log_path = ROOT / "var" / f"bench-gunicorn-{port}.log"
    log_path.parent.mkdir(exist_ok=True)
    log_file = log_path.open("wb")  # never a pipe: a full pipe would stall the server
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "gunicorn",
            "--config",
            "deploy/gunicorn.conf.py",
            "console.wsgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz")
        while len(children(proc.pid)) < workers:
            time.sleep(0.1)
        yield base, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log_file.close()
        errors = [
            ln
            for ln in log_path.read_text(errors="replace").splitlines()
            if "ERROR" in ln or "Traceback" in ln
        ]
        if errors:
            print(
                f"gunicorn logged {len(errors)} errors, first: {errors[0][:300]} (log: {log_path})",
                file=sys.stderr,
            )
        else:
            log_path.unlink()
