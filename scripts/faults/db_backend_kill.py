"""The console on PostgreSQL under a small concurrent load while its database backends are
killed (`pg_terminate_backend` from another connection): how many answers were 5xx.

    DATABASE_URL=postgres://…/console_x python scripts/faults/db_backend_kill.py \
        [--seconds 40] [--clients 6] [--every 0.3]

Runs on a database of its own beside the one DATABASE_URL names (`<name>_faults`, made
afresh, migrated and seeded, dropped at the end). Starts the real console (`manage.py
run_console --no-agent`) and one agent with the `simulated` runtime; then, for
`--seconds`, `--clients` threads loop over a mix of calls (the API's reads of jobs, quotas
and nodes, keyed creates with an `Idempotency-Key`, signed-in pages: dashboard and job
list) beside the agent's heartbeats, while a killer terminates every client backend of the
database every `--every` seconds or, on a machine where calls take longer, every twice the
p90 of the slowest kind of call, measured first under the same load without kills
(`--calibrate` seconds; a kill faster than a call can finish fails it on any server). A
client does what the CLI does: a 503 is retried after Retry-After (at most 3 times, the
same key). Prints the answers by status, the 503s seen
on the way, the backends killed, the **5xx count (goal 0)** and the 500s (goal 0); exits 1
when either is not 0. Bounded: `--seconds` plus the console's start (about a minute with
the defaults). docs/fault-tolerance.md ("A lost database connection"); `make faults` runs it.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import requests
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from scripts.throwaway import console_env, free_port, manage, stop, wait_for  # noqa: E402

NODE = "faults-gpu-0"
TERMINATE = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend'"
)


def fresh_database(database_url: str, *, drop_only: bool = False) -> str:
    """`<name>_faults` beside the database DATABASE_URL names, made afresh (each run starts
    with no node registered); its URL."""
    parts = urlsplit(database_url)
    name = f"{parts.path.lstrip('/')}_faults"
    server = parts._replace(path="/postgres").geturl()
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if not drop_only:
            db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return parts._replace(path=f"/{name}").geturl()


# A kill every twice the slowest kind's p90 at the fastest (0.3 s on a fast machine). At
# once the p90, one call in ten of that kind outlasts the cadence, and a call that outlasts
# it fails on any server, retries or not (on this 2-CPU machine, quiet: pages' p90 0.43 s,
# cadence 0.44 s, 5 of 407 calls failed all four tries). Calls under the kills also pay a
# new connection each.
KILL_SPANS = 2


class Killer(threading.Thread):
    """Terminates the database's other client backends every `every` seconds."""

    def __init__(self, database_url: str, every: float) -> None:
        super().__init__(daemon=True)
        self.db = psycopg.connect(database_url, autocommit=True)
        self.every = every
        self.halt = threading.Event()
        self.killed = 0

    def run(self) -> None:
        while not self.halt.wait(self.every):
            self.killed += self.db.execute(TERMINATE).fetchone()[0]

    def finish(self) -> None:
        self.halt.set()
        self.join(timeout=10)
        self.db.close()


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.final: Counter = Counter()  # (kind, status) of each call's last answer
        self.retried_503 = 0
        self.samples: list[str] = []

    def add(self, kind: str, response: requests.Response | None, retried: int) -> None:
        status = response.status_code if response is not None else 0
        with self.lock:
            self.final[(kind, status)] += 1
            self.retried_503 += retried
            if (status >= 500 or status in (0, 400)) and len(self.samples) < 5:
                text = response.text[:300] if response is not None else "no answer"
                self.samples.append(f"{kind} {status}: {text!r}")


def call(session: requests.Session, method: str, url: str, **kwargs):
    """One call as the CLI makes it: a 503 is retried after Retry-After, at most 3 times."""
    retried = 0
    for _ in range(4):
        try:
            response = session.request(method, url, timeout=30, **kwargs)
        except requests.RequestException:
            return None, retried
        if response.status_code != 503:
            return response, retried
        retried += 1
        time.sleep(min(float(response.headers.get("Retry-After", "1")), 2))
    return response, retried - 1


def sign_in(url: str, username: str, password: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{url}/login/", timeout=30)
    response = session.post(
        f"{url}/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": session.cookies.get("csrftoken", ""),
        },
        timeout=30,
    )
    if "sessionid" not in session.cookies:
        sys.exit(f"signing in as {username} failed ({response.status_code})")
    return session


def client(
    url: str,
    token: str,
    page: requests.Session,
    quota: str,
    until: float,
    tally: "Tally",
    durations: list[tuple[str, float]] | None = None,
):
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {token}"
    job = {"name": "faults", "quota": quota, "image": "busybox", "command": "sleep 1"}
    turn = 0
    while time.monotonic() < until:
        turn += 1
        kind = ("jobs", "quotas", "nodes", "create", "page", "pages")[turn % 6]
        started = time.monotonic()
        if kind == "create":
            key = {"Idempotency-Key": uuid.uuid4().hex}
            response, retried = call(api, "POST", f"{url}/api/v1/jobs", json=job, headers=key)
        elif kind == "page":
            response, retried = call(page, "GET", f"{url}/")
        elif kind == "pages":
            response, retried = call(page, "GET", f"{url}/jobs/")
        else:
            response, retried = call(api, "GET", f"{url}/api/v1/{kind}")
        if durations is not None:
            durations.append((kind, time.monotonic() - started))
        tally.add(kind, response, retried)


def agent_process(url: str, env: dict, var_dir: Path, log, console) -> subprocess.Popen:
    bootstrap = manage(env, "create_agent_token", "--note", "db fault run").strip()
    return subprocess.Popen(
        [sys.executable, "-m", "agents.node", "--server", url, "--name", NODE,
         "--state-dir", str(var_dir / "agent"), "--runtime", "simulated",
         "--fake-gpus", "8xH200", "--cpus", "112", "--memory-gb", "2048",
         "--parent-pid", str(console.pid)],
        cwd=ROOT, env=env | {"GPU_AGENT_BOOTSTRAP_TOKEN": bootstrap},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def usable_quota(url: str, headers: dict) -> str:
    """A quota of the demo researcher's that takes a job now (the agent's node is Ready)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        nodes = requests.get(f"{url}/api/v1/nodes", headers=headers, timeout=30).json()
        if any(n["name"] == NODE and n["state"] == "Ready" for n in nodes["nodes"]):
            break
        time.sleep(0.5)
    else:
        sys.exit("the simulated agent's node did not become Ready")
    quotas = requests.get(f"{url}/api/v1/quotas", headers=headers, timeout=30).json()["quotas"]
    for quota in quotas:
        job = {"name": "probe", "quota": quota["name"], "image": "busybox", "command": "true"}
        response = requests.post(f"{url}/api/v1/jobs", json=job, headers=headers, timeout=30)
        if response.status_code == 201:
            return quota["name"]
    sys.exit("no quota of the demo researcher takes a job")


def load(url: str, var_dir: Path, options) -> tuple[Tally, int]:
    creds = json.loads((var_dir / "demo-credentials.json").read_text())
    token = creds["api_token"]
    headers = {"Authorization": f"Bearer {token}"}
    quota_name = usable_quota(url, headers)
    pages = [
        sign_in(url, creds["researcher_username"], creds["researcher_password"])
        for _ in range(options.clients)
    ]
    # The same load without kills first: how long a call takes on this machine. Kills
    # faster than a call can finish would fail every slow call on any server; the cadence
    # is the --every floor or KILL_SPANS times the p90 of the slowest kind of call (the
    # signed-in pages take longer than the API's reads: a cadence from all calls' p90 lets
    # almost no page finish between two kills on a slower machine), whichever is slower.
    durations: list[tuple[str, float]] = []
    run_clients(url, token, pages, quota_name, options.calibrate, Tally(), durations)
    by_kind = p90_by_kind(durations)
    slowest = max(by_kind, key=by_kind.__getitem__, default="")
    p90 = by_kind.get(slowest, 0.0)
    every = max(options.every, KILL_SPANS * p90)
    shown = ", ".join(f"{kind} {value * 1000:.0f}" for kind, value in sorted(by_kind.items()))
    print(
        f"kill cadence: every {every:.2f} s (p90 without kills, ms: {shown}; the slowest, "
        f"{slowest}, x {KILL_SPANS}; {len(durations)} calls; floor --every {options.every})"
    )
    tally = Tally()
    killer = Killer(options.database_url, every)
    killer.start()
    run_clients(url, token, pages, quota_name, options.seconds, tally)
    killer.finish()
    return tally, killer.killed


def p90_by_kind(durations: list[tuple[str, float]]) -> dict[str, float]:
    """Each kind of call's 90th percentile duration, in seconds."""
    kinds: dict[str, list[float]] = {}
    for kind, seconds in durations:
        kinds.setdefault(kind, []).append(seconds)
    return {k: sorted(v)[int(0.9 * (len(v) - 1))] for k, v in kinds.items()}


def run_clients(url, token, pages, quota_name, seconds, tally, durations=None) -> None:
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(
            target=client, args=(url, token, page, quota_name, until, tally, durations)
        )
        for page in pages
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--every", type=float, default=0.3, help="seconds between kills, at least")
    parser.add_argument(
        "--calibrate", type=float, default=5, help="seconds of load without kills first"
    )
    options = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL", "")
    if urlsplit(database_url).scheme not in ("postgres", "postgresql"):
        sys.exit("DATABASE_URL must name a PostgreSQL database of this run's own")
    options.database_url = fresh_database(database_url)
    var_dir = ROOT / "var" / "faults" / "db"
    shutil.rmtree(var_dir, ignore_errors=True)  # the agent's state of an earlier run
    var_dir.mkdir(parents=True)
    # Loops in this process; rate limits counted in the database (its purge included).
    env = console_env(
        var_dir,
        CONSOLE_LOOPS="inprocess",
        RATE_LIMIT_STORE="database",
        CONN_MAX_AGE="60",
        DATABASE_URL=options.database_url,
    )
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(var_dir / "console.log", "w") as log:
        console = subprocess.Popen(
            [sys.executable, "manage.py", "run_console", "--no-agent", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        agent = None
        try:
            wait_for("/healthz", lambda: requests.get(f"{url}/healthz", timeout=5).ok, console, 60)
            agent = agent_process(url, env, var_dir, log, console)
            tally, killed = load(url, var_dir, options)
        finally:
            stop(agent, timeout=30)
            stop(console, timeout=30)
            fresh_database(database_url, drop_only=True)
    return report(tally, killed, time.monotonic() - started, var_dir)


def report(tally: Tally, killed: int, seconds: float, var_dir: Path) -> int:
    total = sum(tally.final.values())
    by_status = Counter()
    for (_, status), n in tally.final.items():
        by_status[status] += n
    server_errors = sum(n for status, n in by_status.items() if status >= 500)
    no_answer = by_status.get(0, 0)
    print(f"calls: {total} in {seconds:.0f} s; backends terminated: {killed}")
    print("final answers by status:", dict(sorted(by_status.items())))
    print("by kind:", {f"{k} {s}": n for (k, s), n in sorted(tally.final.items())})
    print(f"503s retried by the clients (Retry-After): {tally.retried_503}")
    print(f"no answer (connection failed): {no_answer}")
    print(f"500s: {by_status.get(500, 0)} (goal 0)")
    print(f"5xx count: {server_errors} (goal 0)")
    for sample in tally.samples:
        print("  e.g.", sample)
    print(f"console log: {var_dir / 'console.log'}")
    return 1 if server_errors or no_answer or killed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
