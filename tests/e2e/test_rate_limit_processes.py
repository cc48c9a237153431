"""Per-token rate limits hold across web processes: gunicorn with three workers on the
embedded SQLite database (the database store), concurrent requests on fresh connections
land on several workers, and exactly the limit is let through."""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import ROOT, console_env, free_port, manage, wait_for

pytestmark = pytest.mark.e2e

LIMIT = 6


def test_the_limit_is_shared_by_every_worker_process(tmp_path):
    env = console_env(tmp_path, None)
    env.update(API_RATE_LIMIT=f"{LIMIT}/300", CONSOLE_LOOPS="inprocess")
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")
    token = json.loads((tmp_path / "demo-credentials.json").read_text())["api_token"]
    port = free_port()
    log = open(tmp_path / "gunicorn.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "console.wsgi:application",
            "--bind", f"127.0.0.1:{port}",
            "--workers", "3",
            "--access-logfile", "-",
            "--access-logformat", "%(p)s %(s)s",
        ],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return requests.get(f"{url}/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, 60, message="gunicorn did not come up")

        def call(_):
            # A new connection each, all at once: every worker takes some of them.
            return requests.get(
                f"{url}/api/v1/me",
                headers={"Authorization": f"Bearer {token}", "Connection": "close"},
                timeout=30,
            )

        with ThreadPoolExecutor(max_workers=LIMIT + 4) as pool:
            responses = list(pool.map(call, range(LIMIT + 4)))
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] * LIMIT + [429] * 4
        for response in responses:
            if response.status_code == 429:
                assert int(response.headers["Retry-After"]) >= 1
                assert response.json()["error"]["code"] == "rate_limited"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    served_by = {
        line.split()[0]
        for line in (tmp_path / "gunicorn.log").read_text().splitlines()
        if line.split()[-1:] in (["200"], ["429"])
    }
    assert len(served_by) >= 2, "every request went to one worker; nothing was shared"
