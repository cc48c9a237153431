"""The production compose stack, brought up as README "Production" says, on podman.

`make test-deploy` (DEPLOY_TEST=1) runs it: a Debian base image made here (deploy/base-image,
no registry), the images built by compose, the console stack (caddy, web, worker, beat,
postgres, redis, migrate) and a node agent (deploy/compose.agent.yml with the no-GPU
override) whose docker runtime is podman's Docker API. Torn down, volumes included, at the
end. What differs from the README's commands, and why (podman 4.3 of Debian 12):
`podman-compose … up --no-deps` (podman 4.3 cannot start a container whose dependency has
dependencies, and ignores healthy conditions: every service waits for what it needs itself),
and health checks run by `podman healthcheck run` (podman runs them only under systemd).
"""

import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
PROJECT = os.environ.get("DEPLOY_TEST_PROJECT", "gpuconsole-deploytest")
AGENT_NAME = "deploy-node-1"
JOB_IMAGE = "localhost/busybox:test"  # scripts/podman-service imports it
HEALTHCHECKED = ("postgres", "redis", "web", "worker", "caddy")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], object], timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def run(args: list[str], env: dict, timeout: float = 600, check: bool = True, **kw):
    result = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, **kw
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{shlex.join(args)} exited {result.returncode}\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-3000:]}"
        )
    return result


@dataclass
class Stack:
    tmp: Path
    env: dict[str, str]
    env_file: Path
    agent_env_file: Path
    url: str
    ca: Path
    creds: dict = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def compose_cmd(self) -> list[str]:
        return [
            str(ROOT / ".venv/bin/podman-compose"),
            "--env-file",
            str(self.env_file),
            "--in-pod",
            "false",
            "-p",
            PROJECT,
        ]

    def compose(self, *args: str, timeout: float = 600, check: bool = True):
        return run([*self.compose_cmd, *args], self.env, timeout=timeout, check=check)

    def agent_compose(self, *args: str, timeout: float = 300, check: bool = True):
        return run(
            [
                str(ROOT / ".venv/bin/podman-compose"),
                "--env-file",
                str(self.agent_env_file),
                "--in-pod",
                "false",
                "-p",
                f"{PROJECT}-agent",
                "-f",
                "deploy/compose.agent.yml",
                "-f",
                "deploy/compose.agent.no-gpu.yml",
                *args,
            ],
            self.env,
            timeout=timeout,
            check=check,
        )

    def container(self, service: str) -> str:
        return f"{PROJECT}_{service}_1"

    def podman(self, *args: str, timeout: float = 120, check: bool = True):
        return run(["podman", *args], self.env, timeout=timeout, check=check)

    def healthy(self, service: str) -> bool:
        return (
            self.podman("healthcheck", "run", self.container(service), check=False).returncode == 0
        )

    def wait_healthy(self, services=HEALTHCHECKED, timeout: float = 180) -> None:
        for service in services:
            wait_for(lambda s=service: self.healthy(s), timeout, f"{service} to be healthy", 1)

    def api(self) -> requests.Session:
        session = requests.Session()
        session.trust_env = False  # else REQUESTS_CA_BUNDLE would win over `verify`
        session.verify = str(self.ca)
        session.headers["Authorization"] = f"Bearer {self.creds['api_token']}"
        return session

    def submit(self, command: str, **spec) -> int:
        body = {
            "quota": "vision-h200",
            "image": JOB_IMAGE,
            "command": command,
            "gpus_per_worker": 1,
            "cpus_per_worker": 1,
            "memory_gb_per_worker": 1,
            **spec,
        }
        response = self.api().post(f"{self.url}/api/v1/jobs", json=body, timeout=30)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def job(self, job_id: int) -> dict:
        response = self.api().get(f"{self.url}/api/v1/jobs/{job_id}", timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def job_when(self, job_id: int, statuses: set[str], timeout: float = 120) -> dict:
        def reached():
            try:
                job = self.job(job_id)
            except (requests.ConnectionError, AssertionError):
                return None  # web restarting
            return job if job["status"] in statuses else None

        return wait_for(reached, timeout, f"job {job_id} to be one of {sorted(statuses)}", 1)

    def log_lines(self, job_id: int) -> list[str]:
        lines, after = [], 0
        while True:
            response = self.api().get(
                f"{self.url}/api/v1/jobs/{job_id}/logs", params={"after": after}, timeout=30
            )
            assert response.status_code == 200, response.text
            page = response.json()
            lines += [line["text"] for line in page["lines"]]
            if not page["lines"]:
                return lines
            after = page["next_after"]


def _prerequisites(env: dict) -> None:
    missing = [tool for tool in ("podman", "mmdebstrap") if not shutil.which(tool)]
    if not (ROOT / ".venv/bin/podman-compose").exists():
        missing.append(".venv/bin/podman-compose (make venv)")
    if missing:
        pytest.fail(f"test-deploy needs {', '.join(missing)} (scripts/deploy-tools installs them)")
    run(["scripts/podman-service"], env)


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Iterator[Stack]:
    if os.environ.get("DEPLOY_TEST") != "1":
        pytest.skip("the compose deployment test runs with `make test-deploy`")
    tmp = tmp_path_factory.mktemp("deploy")
    service_dir = Path(
        os.environ.get("PODMAN_SOCKET", "/tmp/gpu-console-podman/podman.sock")
    ).parent
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))
        },
        "CONTAINERS_CONF": str(service_dir / "containers.conf"),
    }
    _prerequisites(env)
    timings: dict[str, float] = {}
    started = time.monotonic()
    base = run(["deploy/base-image"], env).stdout.strip().splitlines()[-1]
    timings["base image"] = time.monotonic() - started

    https_port = free_port()
    secrets_env = {
        "SECRET_KEY": secrets.token_urlsafe(48),
        "POSTGRES_PASSWORD": secrets.token_urlsafe(24),
        "METRICS_TOKEN": secrets.token_urlsafe(32),
        "CONSOLE_HOST": "localhost",
        "CADDY_TLS": "internal",
        "BASE_IMAGE": base,
        "PUBLISH_ADDRESS": "127.0.0.1",
        "HTTP_PORT": str(free_port()),
        "HTTPS_PORT": str(https_port),
        # Two CPUs in CI: fewer processes than the defaults (4 and 4).
        "WORKER_CONCURRENCY": "2",
        "WEB_CONCURRENCY": "2",
    }
    env_file = tmp / "console.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in secrets_env.items()))
    env_file.chmod(0o600)
    state_dir = tmp / "agent-state"
    state_dir.mkdir()
    ca = state_dir / "console-ca.crt"
    url = f"https://localhost:{https_port}"
    agent_env_file = tmp / "agent.env"
    s = Stack(tmp, env, env_file, agent_env_file, url, ca, timings=timings)
    s.env["METRICS_TOKEN"] = secrets_env["METRICS_TOKEN"]
    s.compose("down", "--volumes", check=False)  # leftovers of an interrupted run
    try:
        started = time.monotonic()
        s.compose("up", "-d", "--build", "--no-deps", timeout=1200)
        timings["compose up --build"] = time.monotonic() - started
        started = time.monotonic()
        s.wait_healthy()
        timings["healthy"] = time.monotonic() - started
        ca.write_text(
            s.podman(
                "exec", s.container("caddy"), "cat", "/data/caddy/pki/authorities/local/root.crt"
            ).stdout
        )
        # Demo tenant, quotas, researcher and API token (an operator would use the admin).
        s.compose(
            # A folder of its own: seed_demo makes its var folder private (chmod 0700).
            "exec",
            "-T",
            "-e",
            "CONSOLE_VAR_DIR=/tmp/seed",
            "web",
            "python",
            "manage.py",
            "seed_demo",
        )
        s.creds = json.loads(
            s.podman("exec", s.container("web"), "cat", "/tmp/seed/demo-credentials.json").stdout
        )
        token = (
            s.compose(
                "exec",
                "-T",
                "web",
                "python",
                "manage.py",
                "create_agent_token",
                "--note",
                AGENT_NAME,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        agent_env_file.write_text(
            f"GPU_AGENT_SERVER={url}\nGPU_AGENT_BOOTSTRAP_TOKEN={token}\n"
            f"GPU_AGENT_NAME={AGENT_NAME}\nGPU_AGENT_STATE_DIR={state_dir}\n"
            f"GPU_AGENT_CA_BUNDLE={ca}\nDOCKER_SOCKET={service_dir / 'podman.sock'}\n"
            f"GPU_AGENT_FAKE_GPUS=2xH200\n"
        )
        agent_env_file.chmod(0o600)
        started = time.monotonic()
        s.agent_compose("up", "-d", "--no-deps")
        wait_for(
            lambda: (
                "registered node"
                in s.podman("logs", f"{PROJECT}-agent_agent_1").stderr
                + s.podman("logs", f"{PROJECT}-agent_agent_1").stdout
            ),
            60,
            "the agent to register",
        )
        timings["agent registered"] = time.monotonic() - started
        yield s
    finally:
        started = time.monotonic()
        for name in (
            f"{PROJECT}-agent_agent_1",
            *(s.container(x) for x in ("web", "worker", "beat", "caddy")),
        ):
            logs = s.podman("logs", "--tail", "200", name, check=False)
            (tmp / f"{name}.log").write_text(logs.stdout + logs.stderr)
        s.agent_compose("down", "--volumes", check=False)
        leftovers = s.podman(
            "ps", "-aq", "--filter", f"label=io.gpu-console.node={AGENT_NAME}", check=False
        ).stdout.split()
        if leftovers:
            s.podman("rm", "-f", *leftovers, check=False)
        s.compose("down", "--volumes", check=False)
        timings["teardown"] = time.monotonic() - started
        print("\ntest-deploy timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
        print(f"container logs kept in {tmp}")
