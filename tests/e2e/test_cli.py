"""The `gpu-console` CLI, run as a real subprocess (the installed console script) against
the real embedded console (web server, scheduler, local agent running the jobs).

Submit an array and wait for it, follow logs to the end and across a restart, stop,
restart, quota, list and show; `--json` output parses; `wait`'s exit code is the outcome.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningConsole

pytestmark = pytest.mark.e2e

CLI = Path(sys.executable).parent / "gpu-console"
SMALL = ["--quota", "vision-h200", "--image", "busybox", "--gpus", "0", "--cpus", "1",
         "--memory", "1"]  # fmt: skip


def run(console: RunningConsole, *args: str, timeout: float = 180, home: Path | None = None):
    env = {
        **os.environ,
        "GPU_CONSOLE_URL": console.url,
        "GPU_CONSOLE_TOKEN": console.creds["api_token"],
        "XDG_CONFIG_HOME": str(home or console.var_dir / "cli-home"),
    }
    return subprocess.run(
        [str(CLI), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def run_json(console: RunningConsole, command: str, *args: str) -> dict:
    result = run(console, command, "--json", *args)
    assert result.returncode == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


def own_lines(text: str) -> list[str]:
    """The job's output (the process runtime first says it ignores the image)."""
    return [line for line in text.splitlines() if not line.startswith("[agent] ")]


def test_the_console_script_is_installed():
    result = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and result.stdout.startswith("gpu-console ")


def test_submit_an_array_wait_and_read_every_log(running_console):
    created = run_json(
        running_console,
        "submit",
        *SMALL,
        "--name",
        "sweep",
        "--array",
        "3",
        "--",
        'echo "index=$ARRAY_INDEX of $ARRAY_COUNT"; sleep 1; echo done',
    )
    jobs = created["jobs"]
    assert [j["name"] for j in jobs] == ["sweep-0", "sweep-1", "sweep-2"]
    ids = [str(j["id"]) for j in jobs]
    waited = run(running_console, "wait", *ids, "--interval", "0.5", "--timeout", "120")
    assert waited.returncode == 0, waited.stderr
    assert f"job {ids[0]}" in waited.stderr  # the progress line
    for index, job_id in enumerate(ids):
        logs = run(running_console, "logs", job_id, "-f", timeout=120)
        assert logs.returncode == 0, logs.stderr
        assert own_lines(logs.stdout) == [f"index={index} of 3", "done"]
    listed = run_json(running_console, "list", "--name", "sweep", "--mine")
    assert {str(j["id"]) for j in listed["jobs"]} >= set(ids)
    shown = run_json(running_console, "show", ids[1])
    assert shown["status"] == "Completed" and shown["env"]["ARRAY_INDEX"] == "1"
    table = run(running_console, "list", "--name", "sweep")
    assert table.returncode == 0 and "sweep-2" in table.stdout and "Completed" in table.stdout


def test_follow_a_running_job_then_stop_and_restart_it(running_console):
    submitted = run_json(
        running_console,
        "submit",
        *SMALL,
        "--name",
        "ticker",
        "--",
        "for i in $(seq 1 600); do echo tick $i; sleep 0.1; done",
    )
    job_id = str(submitted["id"])
    # Read on with stdout.read(), not communicate(timeout=…): that reads the pipe itself and
    # would miss what readline() already buffered.
    follower = subprocess.Popen(
        [str(CLI), "logs", job_id, "-f"],
        env={
            **os.environ,
            "GPU_CONSOLE_URL": running_console.url,
            "GPU_CONSOLE_TOKEN": running_console.creds["api_token"],
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    first = follower.stdout.readline()  # blocks until the job runs and prints
    while first.startswith("[agent] "):
        first = follower.stdout.readline()
    assert first.strip() == "tick 1"
    stopped = run(running_console, "stop", job_id)
    assert stopped.returncode == 0 and "Stopping" in stopped.stdout
    waited = run(running_console, "wait", job_id, "--interval", "0.5", "--json")
    assert waited.returncode == 3, waited.stderr  # Stopped
    assert json.loads(waited.stdout)["jobs"][0]["status"] == "Stopped"
    assert follower.wait(timeout=120) == 0  # the follower ends with the job
    rest = follower.stdout.read()
    follower.stdout.close()
    ticks = [first.strip(), *own_lines(rest)]
    assert ticks == [f"tick {i}" for i in range(1, len(ticks) + 1)]  # in order, once each
    assert 1 < len(ticks) < 600

    again = run_json(running_console, "restart", job_id)
    assert again["cloned_from"] == int(job_id) and again["id"] != int(job_id)
    run(running_console, "stop", str(again["id"]))
    assert run(running_console, "wait", str(again["id"]), "--interval", "0.5").returncode == 3
    refused = run(running_console, "stop", job_id)
    assert refused.returncode == 2 and "already Stopped" in refused.stderr


def test_a_quoted_argv_runs_as_given(running_console):
    """`-- sh -c '…'`: the arguments are kept exactly, so the shell loop runs."""
    created = run_json(
        running_console, "submit", *SMALL, "--", "sh", "-c", "for i in $(seq 1 3); do echo $i; done"
    )
    assert created["command"] == "sh -c 'for i in $(seq 1 3); do echo $i; done'"
    job_id = str(created["id"])
    assert run(running_console, "wait", job_id, "--interval", "0.5").returncode == 0
    assert own_lines(run(running_console, "logs", job_id).stdout) == ["1", "2", "3"]


def test_logs_follow_returns_as_soon_as_the_job_has_ended(running_console):
    """The agent reports an exited worker once its lines are all delivered, so a follower
    stops then, not a settle window (3 heartbeats) later."""
    created = run_json(running_console, "submit", *SMALL, "--", "echo one; sleep 2; echo last")
    follower = subprocess.Popen(
        [str(CLI), "logs", str(created["id"]), "-f"],
        env={
            **os.environ,
            "GPU_CONSOLE_URL": running_console.url,
            "GPU_CONSOLE_TOKEN": running_console.creds["api_token"],
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines = []
    for line in follower.stdout:
        lines.append(line.strip())
        if line.strip() == "last":
            break
    last_line_at = time.monotonic()
    assert follower.wait(timeout=120) == 0
    took = time.monotonic() - last_line_at
    follower.stdout.close()
    assert own_lines("\n".join(lines)) == ["one", "last"]
    # Before: at least the settle window (3 s with the tests' 1 s heartbeat) after the end.
    assert took < 2.5, f"logs -f returned {took:.1f} s after the job's last line"


def test_logs_follow_a_job_across_its_restart(running_console, tmp_path):
    marker = tmp_path / f"ran-{uuid.uuid4().hex}"
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "quota: vision-h200\nimage: busybox\ngpus_per_worker: 0\ncpus_per_worker: 1\n"
        "memory_gb_per_worker: 1\nname: flaky\nfault_tolerance: true\n"
        "restart_policy: OnFailure\nmax_restarts: 2\n"
        f"env:\n  MARK: {marker}\n"
        "command: |\n"
        '  if [ -e "$MARK" ]; then echo second attempt; else touch "$MARK"; '
        "echo first attempt; exit 3; fi\n"
    )
    job_id = str(run_json(running_console, "submit", "-f", str(spec))["id"])
    logs = run(running_console, "logs", job_id, "-f", timeout=180)
    assert logs.returncode == 0, logs.stderr
    assert own_lines(logs.stdout) == ["first attempt", "second attempt"], (logs.stdout, logs.stderr)
    assert "--- attempt 2 ---" in logs.stderr
    assert run(running_console, "wait", job_id, "--interval", "0.5").returncode == 0
    shown = run_json(running_console, "show", job_id)
    assert shown["attempt"] == 2 and shown["restarts"][0]["exit_code"] == 3


def test_a_failed_job_makes_wait_exit_1(running_console):
    job_id = str(run_json(running_console, "submit", *SMALL, "--", "echo oops; exit 7")["id"])
    waited = run(running_console, "wait", job_id, "--interval", "0.5", "--json")
    assert waited.returncode == 1
    outcome = json.loads(waited.stdout)["jobs"][0]
    assert outcome["status"] == "Failed" and outcome["exit_code"] == 7


def test_quota_whoami_and_errors(running_console, tmp_path):
    quotas = run_json(running_console, "quota")["quotas"]
    assert {q["name"] for q in quotas} == {"vision-h200", "shared-h200"}
    assert {"size", "used", "lent", "borrowed", "free"} <= set(quotas[0]["usage"])
    one = run(running_console, "quota", "vision-h200")
    assert one.returncode == 0 and "MY POSITIONS" in one.stdout
    assert run_json(running_console, "whoami")["username"] == "researcher"
    refused = run(running_console, "submit", *SMALL, "--workers", "0", "--", "true")
    assert refused.returncode == 2 and "Workers must be between" in refused.stderr
    assert run(running_console, "show", "999999").returncode == 2
    missing = run(running_console, "submit", "--image", "busybox", "--", "true")
    assert missing.returncode == 2 and "missing quota" in missing.stderr


def test_login_writes_a_private_config_file(running_console, tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    env.pop("GPU_CONSOLE_URL", None)
    env.pop("GPU_CONSOLE_TOKEN", None)
    token = running_console.creds["api_token"]
    login = subprocess.run(
        [str(CLI), "--url", running_console.url, "--token", token, "login"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    path = tmp_path / "gpu-console" / "config.toml"
    assert path.stat().st_mode & 0o777 == 0o600
    whoami = subprocess.run(
        [str(CLI), "whoami"], env=env, capture_output=True, text=True, timeout=60
    )
    assert whoami.returncode == 0 and whoami.stdout.startswith("researcher at ")
    bad = subprocess.run(
        [str(CLI), "--url", running_console.url, "--token", "gqc_00000000_x", "whoami"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "API token" in bad.stderr
