"""The web service as the compose stack runs it: gunicorn with deploy/gunicorn.conf.py and
production settings. Its health check passes (an allowed Host, no redirect for /healthz);
X-Forwarded-Proto counts only from `forwarded_allow_ips` (the TLS proxy), so a client that
reaches gunicorn directly cannot pass for HTTPS; every log line is JSON and the access line
carries the request id the response returned."""

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.healthcheck import check, health_host
from tests.e2e.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def start(tmp_path: Path, port: int, forwarded_allow_ips: str) -> subprocess.Popen:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "CONSOLE_LOOPS", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        CONSOLE_ENV="production",
        SECRET_KEY="s" * 50,
        ALLOWED_HOSTS="console.test,.example.org",
        CONSOLE_VAR_DIR=str(tmp_path),
        GUNICORN_BIND=f"127.0.0.1:{port}",
        WEB_CONCURRENCY="1",
        GUNICORN_THREADS="2",
        FORWARDED_ALLOW_IPS=forwarded_allow_ips,
    )
    (tmp_path / "staticfiles").mkdir(exist_ok=True)  # collectstatic's folder in the image
    with open(tmp_path / f"gunicorn-{forwarded_allow_ips}.log", "w") as log:
        return subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "--config",
                "deploy/gunicorn.conf.py",
                "console.wsgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def get(port: int, path: str, **headers: str) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path, headers={"Host": "console.test", **headers})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


@pytest.fixture
def gunicorn(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", "console.test,.example.org")
    started: list[subprocess.Popen] = []

    def run(forwarded_allow_ips: str) -> int:
        port = free_port()
        process = start(tmp_path, port, forwarded_allow_ips)
        started.append(process)
        deadline = time.monotonic() + 60
        while not check(port, timeout=2)[0]:
            assert process.poll() is None, "gunicorn exited; see its log in " + str(tmp_path)
            assert time.monotonic() < deadline, "gunicorn did not become healthy"
            time.sleep(0.2)
        return port

    yield run
    for process in started:
        process.terminate()
        process.wait(30)


def test_health_check_passes_and_proxy_header_is_trusted_only_from_the_proxy(gunicorn, tmp_path):
    port = gunicorn("10.9.9.9")  # the proxy's address: not ours
    healthy, detail = check(port)
    assert healthy, detail
    assert get(port, "/healthz", Host="evil.example.com").status == 400
    # Plain HTTP is redirected to HTTPS, and claiming HTTPS from outside the proxy's
    # network changes nothing.
    for headers in ({}, {"X-Forwarded-Proto": "https"}):
        response = get(port, "/metrics", **headers)
        assert response.status == 301
        assert response.getheader("Location") == "https://console.test/metrics"

    trusted = gunicorn("127.0.0.1")  # now we are the proxy
    assert get(trusted, "/metrics", **{"X-Forwarded-Proto": "https"}).status == 401
    assert get(trusted, "/metrics").status == 301


def test_logs_are_json_with_the_request_id(gunicorn, tmp_path):
    port = gunicorn("127.0.0.1")
    response = get(port, "/healthz", **{"X-Request-ID": "probe-42"})
    assert response.getheader("X-Request-ID") == "probe-42"
    log = tmp_path / "gunicorn-127.0.0.1.log"
    deadline = time.monotonic() + 30
    while "probe-42" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert any(e["logger"] == "gunicorn.error" for e in entries)
    [access] = [e for e in entries if e.get("request_id") == "probe-42"]
    assert access["logger"] == "console.access"
    assert (access["path"], access["status_code"]) == ("/healthz", 200)


@pytest.mark.parametrize(
    ("allowed", "host"),
    [("console.test", "console.test"), ("*,.example.org", "example.org"), ("", "localhost")],
)
def test_health_host(allowed, host):
    assert health_host(allowed) == host
