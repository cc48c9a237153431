"""The production process layout on one machine: gunicorn, a Celery worker and Celery beat
on Redis, PostgreSQL, and a real agent. A job submitted through the API is scheduled by the
Celery worker through the on-commit trigger (beat's scheduling tick is an hour away) and
runs to Completed, while beat keeps both monitors' ticks coming; the workspace's webhook
hears of it through the notifications task."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import ROOT, _postgres_database, console_env, free_port, wait_for
from tests.e2e.conftest import manage as _manage
from tests.notifications.conftest import Receiver

pytestmark = pytest.mark.e2e

needs_stack = pytest.mark.skipif(
    not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")),
    reason="needs DATABASE_URL (PostgreSQL) and REDIS_URL; .ci/run's second pass sets both",
)


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@needs_stack
def test_job_runs_through_gunicorn_celery_and_beat(tmp_path):
    database_url, drop = _postgres_database(os.environ["DATABASE_URL"])
    env = console_env(tmp_path, database_url)
    # Beat's scheduling tick an hour away: only the on-commit trigger can admit the job.
    env.update(
        REDIS_URL=os.environ["REDIS_URL"],
        CONSOLE_LOOPS="celery",
        NOTIFY_ALLOW_LOOPBACK="1",  # the test's webhook receiver listens on 127.0.0.1
        SCHEDULER_INTERVAL="3600",
        MONITOR_INTERVAL="1",
    )
    bin_dir = Path(sys.executable).parent
    processes: list[subprocess.Popen] = []
    receivers: list[Receiver] = []
    try:
        _manage(env, "migrate", "--noinput")
        _manage(env, "seed_demo")
        bootstrap = _manage(env, "create_agent_token", "--note", "celery e2e").strip()
        import json

        creds = json.loads((tmp_path / "demo-credentials.json").read_text())
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        # Drop triggers left in the test Redis database by an earlier run.
        import redis

        redis.Redis.from_url(env["REDIS_URL"]).flushdb()
        processes.append(
            _spawn(
                [
                    str(bin_dir / "gunicorn"),
                    "console.wsgi:application",
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--workers",
                    "2",
                    "--threads",
                    "4",
                ],
                env,
                tmp_path / "web.log",
            )
        )
        processes.append(
            _spawn(
                [
                    str(bin_dir / "celery"),
                    "-A",
                    "console",
                    "worker",
                    "--pool",
                    "threads",
                    "--concurrency",
                    "2",
                    "--loglevel",
                    "INFO",
                ],
                env,
                tmp_path / "worker.log",
            )
        )
        processes.append(
            _spawn(
                [
                    str(bin_dir / "celery"),
                    "-A",
                    "console",
                    "beat",
                    "--loglevel",
                    "INFO",
                    "--schedule",
                    str(tmp_path / "beat-schedule"),
                ],
                env,
                tmp_path / "beat.log",
            )
        )

        def up() -> bool:
            try:
                return requests.get(f"{url}/healthz", timeout=2).status_code == 200
            except requests.RequestException:  # not listening yet, or busy starting
                return False

        wait_for(up, 60, message="gunicorn did not come up")
        agent_env = dict(env, GPU_AGENT_BOOTSTRAP_TOKEN=bootstrap)
        processes.append(
            _spawn(
                [
                    sys.executable,
                    "-m",
                    "agents.node",
                    "--server",
                    url,
                    "--name",
                    "celery-node",
                    "--state-dir",
                    str(tmp_path / "agent"),
                    "--runtime",
                    "process",
                    "--fake-gpus",
                    "8xH200",
                ],
                agent_env,
                tmp_path / "agent.log",
            )
        )
        api = requests.Session()
        api.headers["Authorization"] = f"Bearer {creds['api_token']}"

        def node_ready() -> bool:
            nodes = api.get(f"{url}/api/v1/nodes", timeout=5).json()["nodes"]
            return any(n["name"] == "celery-node" and n["state"] == "Ready" for n in nodes)

        wait_for(node_ready, 60, message="agent did not register")
        # A webhook for the job's workspace: delivered by the Celery task after the commit.
        hook = Receiver()
        receivers.append(hook)
        _manage(
            env,
            "shell",
            "-c",
            "from notifications.models import NotificationRule; "
            "from quotas.models import Workspace; "
            "NotificationRule.objects.create(workspace=Workspace.objects.get(name='vision'), "
            f"url='{hook.url}', events=['completed'])",
        )
        response = api.post(
            f"{url}/api/v1/jobs",
            json={
                "quota": "vision-h200",
                "image": "busybox",
                "command": "echo via-celery",
                "gpus_per_worker": 2,
                "cpus_per_worker": 1,
                "memory_gb_per_worker": 1,
            },
            timeout=10,
        )
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]

        def finished():
            job = api.get(f"{url}/api/v1/jobs/{job_id}", timeout=5).json()
            return job if job["status"] in {"Completed", "Failed", "Stopped"} else None

        job = wait_for(finished, 90, message="job did not finish")
        assert job["status"] == "Completed", job
        assert job["pods"][0]["node"] == "celery-node"
        assert len(job["pods"][0]["gpu_indices"]) == 2
        lines = api.get(f"{url}/api/v1/jobs/{job_id}/logs", timeout=5).json()["lines"]
        assert [line["text"] for line in lines if "via-celery" in line["text"]] == ["via-celery"]
        worker_log = (tmp_path / "worker.log").read_text()
        assert re.search(r"Task jobs\.schedule_tick\[[^]]+\] succeeded", worker_log), worker_log
        delivered = wait_for(hook.accepted, 30, message="the webhook was not delivered")
        assert [d["body"]["event"] for d in delivered] == ["completed"]
        assert delivered[0]["body"]["job"]["id"] == job_id
        assert re.search(
            r"Task notifications\.deliver_due\[[^]]+\] succeeded",
            (tmp_path / "worker.log").read_text(),
        )
        # Beat is alive and each monitor runs as its own task, through the real monitors.
        for task in ("agents.node_monitor_tick", "jobs.job_monitor_tick"):
            wait_for(
                lambda t=task: f"Sending due task {t}" in (tmp_path / "beat.log").read_text(),
                30,
                message=f"beat did not send {task}",
            )
            wait_for(
                lambda t=task: re.search(
                    rf"Task {re.escape(t)}\[[^]]+\] succeeded",
                    (tmp_path / "worker.log").read_text(),
                ),
                30,
                message=f"the worker did not run {task}",
            )
    finally:
        for process in reversed(processes):
            _stop(process)
        for receiver in receivers:
            receiver.close()
        drop()
