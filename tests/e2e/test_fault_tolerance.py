"""Automatic Fault Tolerance end to end: the real console, scheduler and monitors, a real
agent with the process runtime, and a training script that uses the SDK (tests/e2e/ft_train.py).

Each test checks the status sequence (JobEvents), the restart records, that no step is redone
beyond the checkpoint interval, and that never two copies of one worker run at once (the
script holds an exclusive lock per rank and logs DUPLICATE if it cannot get it).

The console runs with short timeouts: heartbeats every second, a node NotReady after 3 s of
silence and Lost after 8 s, monitors every second.
"""

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, RunningConsole, start_console, wait_for

pytestmark = pytest.mark.e2e

SHORT_TIMEOUTS = {"NODE_NOT_READY_AFTER": "3", "NODE_LOST_TIMEOUT": "8"}
SCRIPT = Path(__file__).with_name("ft_train.py")
FINAL = {"Completed", "Failed", "Stopped", "Preempted", "Terminated"}


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    saved = {key: os.environ.get(key) for key in SHORT_TIMEOUTS}
    os.environ.update(SHORT_TIMEOUTS)
    try:
        with start_console(tmp_path_factory.mktemp("ft-console")) as running:
            yield running
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def submit(console: RunningConsole, tmp_path: Path, name: str, **ft) -> tuple[dict, Path]:
    steps = tmp_path / "steps.log"
    env = {
        "CONSOLE_ROOT": str(ROOT),
        "STEP_LOG": str(steps),
        "TOTAL": ft.pop("total", "50"),
        "CKPT_EVERY": "10",
        "STEP_SECONDS": ft.pop("step_seconds", "0.1"),
        "MODE": ft.pop("mode", ""),
        "HANG_AT": "15",
        "WAIT_AT": ft.pop("wait_at", "0"),
    }
    body = {
        "quota": "vision-h200",
        "name": name,
        "image": "python:3.12",
        # exec: /bin/sh (dash) does not exec a -c command itself, and a shell killed by
        # SIGTERM ends the worker before the script's save on SIGTERM could finish.
        "command": f"exec {sys.executable} {SCRIPT}",
        "workers": 1,
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        "env": env,
        "fault_tolerance": True,
        **ft,
    }
    response = console.api().post(f"{console.url}/api/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return response.json(), steps


def get_job(console: RunningConsole, job_id: int) -> dict:
    response = console.api().get(f"{console.url}/api/v1/jobs/{job_id}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def wait_job(console, job_id, predicate, timeout=45, message=""):
    seen = {}

    def check():
        seen["job"] = job = get_job(console, job_id)
        return job if predicate(job) else None

    try:
        return wait_for(check, timeout, message=message or f"job {job_id}")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nlast: {seen.get('job')}\n{console.output()[-3000:]}"
        ) from None


def transitions(job: dict) -> list[tuple[str, str]]:
    """(from, to) of every status change, from the job's events in the API."""
    return [(e["from_status"], e["to_status"]) for e in job["events"] if e["to_status"]]


def without_queue(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The sequence without Pending → Inqueue → Starting detours (timing-dependent)."""
    out = []
    for pair in pairs:
        if pair == ("Pending", "Inqueue"):
            continue
        out.append(("Pending", pair[1]) if pair[0] == "Inqueue" else pair)
    return out


def executed_steps(steps: Path) -> list[tuple[int, int, int]]:
    """(attempt, step, pid) of every executed step; fails on a duplicate worker."""
    rows = []
    for line in steps.read_text().splitlines():
        assert not line.startswith("DUPLICATE"), f"two copies of a worker ran: {line}"
        attempt, _rank, step, pid, _at = line.split()
        rows.append((int(attempt), int(step), int(pid)))
    return rows


def check_steps(steps: Path, total: int, *, slack: int = 10) -> list[tuple[int, int, int]]:
    rows = executed_steps(steps)
    assert sorted({step for _, step, _ in rows}) == list(range(1, total + 1))
    redone = sum(count - 1 for count in Counter(step for _, step, _ in rows).values())
    restarts = len({attempt for attempt, _, _ in rows}) - 1
    assert redone <= slack * max(restarts, 1), f"{redone} steps redone over {restarts} restarts"
    # One process at a time: each attempt's steps come from one pid, attempts in order.
    attempts = [attempt for attempt, _, _ in rows]
    assert attempts == sorted(attempts)
    for attempt in set(attempts):
        assert len({pid for a, _, pid in rows if a == attempt}) == 1
    return rows


def pid_of_latest_step(steps: Path) -> int:
    return executed_steps(steps)[-1][2]


def test_sigkill_restarts_from_the_checkpoint_and_completes(console, tmp_path):
    job, steps = submit(console, tmp_path, "ft-kill")
    wait_job(
        console,
        job["id"],
        lambda j: (j["pods"] or [{}])[0].get("progress") and j["pods"][0]["progress"]["step"] >= 25,
        message="progress to step 25",
    )
    os.kill(pid_of_latest_step(steps), signal.SIGKILL)
    done = wait_job(console, job["id"], lambda j: j["status"] in FINAL, timeout=60)
    assert done["status"] == "Completed", (done["status_reason"], done["events"], done["pods"])
    assert done["attempt"] == 2 and done["restart_count"] == 1
    (record,) = done["restarts"]
    assert (record["kind"], record["exit_code"], record["rule"]) == ("failure", 137, "OOM killed")
    assert (record["from_attempt"], record["to_attempt"]) == (1, 2)
    assert record["restarts_used"] == 1 and record["restarts_max"] == 3
    assert record["running_at"] is not None and record["restart_seconds"] >= 0
    assert done["resume_from"].endswith(("step-20", "step-30"))
    check_steps(steps, 50)
    rows = executed_steps(steps)
    resumed_at = int(done["resume_from"].rsplit("-", 1)[1])
    assert min(step for attempt, step, _ in rows if attempt == 2) == resumed_at + 1
    assert {c["step"] for c in done["checkpoints"]} >= {40, 50}
    assert done["pods"][-1]["progress"]["step"] == 50
    assert (
        "restart 1/3: worker 0 exited 137" in " ".join(e["reason"] for e in done.get("events", []))
        or done["status_reason"]
    )


def test_syntax_error_fails_without_a_restart(console, tmp_path):
    job, steps = submit(console, tmp_path, "ft-syntax", mode="syntax")
    done = wait_job(console, job["id"], lambda j: j["status"] in FINAL)
    assert done["status"] == "Failed" and done["attempt"] == 1, done
    assert "not retryable: SyntaxError" in done["status_reason"]
    assert done["restarts"] == [] and done["exit_code"] == 1
    assert without_queue(transitions(done))[-1] == ("Running", "Failed")
    assert not steps.exists() or executed_steps(steps) == []


def test_a_hang_is_detected_and_the_job_restarts(console, tmp_path):
    job, steps = submit(
        console, tmp_path, "ft-hang", mode="hang", hang_detection=True, hang_timeout=5
    )
    done = wait_job(console, job["id"], lambda j: j["status"] in FINAL, timeout=60)
    assert done["status"] == "Completed", (done["status_reason"], done["events"], done["pods"])
    (record,) = done["restarts"]
    assert record["kind"] == "hang" and record["rule"] == "hang"
    assert "no new progress step" in record["reason"]
    assert ("Running", "Pending") in transitions(done)
    assert without_queue(transitions(done))[-1] == ("Running", "Completed")
    rows = check_steps(steps, 50)
    # The hung attempt stopped at step 14; the restart resumed after the step-10 checkpoint.
    assert max(step for attempt, step, _ in rows if attempt == 1) == 14
    assert min(step for attempt, step, _ in rows if attempt == 2) == 11
    # The hung worker's save on SIGTERM (step 14, attempt 1) came after the restart: fenced.
    assert 14 not in {c["step"] for c in done["checkpoints"]}


def _agent_pid(console: RunningConsole) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agents.node" in cmdline and str(console.var_dir).encode() in b" ".join(cmdline):
            return int(entry.name)
    raise AssertionError("agent process not found")


def test_a_node_cut_off_past_the_timeout_restarts_the_job(console, tmp_path):
    job, steps = submit(console, tmp_path, "ft-node", total="200")
    wait_job(
        console,
        job["id"],
        lambda j: (j["pods"] or [{}])[0].get("progress") and j["pods"][0]["progress"]["step"] >= 12,
        message="progress to step 12",
    )
    agent = _agent_pid(console)
    os.kill(agent, signal.SIGSTOP)
    try:
        unknown = wait_job(
            console, job["id"], lambda j: j["pods"][0]["status"] == "Unknown", timeout=20
        )
        assert unknown["status"] == "Running"
        assert unknown["display_status"] == "Unknown (node not reachable)"
        restarted = wait_job(console, job["id"], lambda j: j["attempt"] == 2, timeout=30)
        assert restarted["pods"][0]["status"] == "Lost"
        assert restarted["status"] in {"Pending", "Inqueue"}
        assert restarted["node_loss_count"] == 1 and restarted["restart_count"] == 0
    finally:
        os.kill(agent, signal.SIGCONT)
    done = wait_job(console, job["id"], lambda j: j["status"] in FINAL, timeout=60)
    assert done["status"] == "Completed", (done["status_reason"], done["events"], done["pods"])
    (record,) = done["restarts"]
    assert record["kind"] == "node_lost" and record["node"] == "local-gpu-0"
    assert record["restarts_used"] == 0  # a lost node does not use the failure budget
    lost = [e for e in done["events"] if e["to_status"] == "Pending" and e["from_status"]]
    assert len(lost) == 1 and "node lost" in lost[0]["reason"]
    assert without_queue(transitions(done))[-1] == ("Running", "Completed")
    rows = executed_steps(steps)
    assert sorted({step for _, step, _ in rows}) == list(range(1, 201))
    # The stale worker ran on while its node was cut off; it was fenced (stopped) when the
    # node came back, before the new attempt started on the same GPU: never two at once.
    stale_last = max(step for attempt, step, _ in rows if attempt == 1)
    resumed = min(step for attempt, step, _ in rows if attempt == 2)
    assert resumed <= stale_last + 1
    assert len({pid for a, _, pid in rows if a == 2}) == 1


def _console_env(console: RunningConsole) -> dict[str, str]:
    """The running console's own environment (its database, whichever backend)."""
    raw = Path(f"/proc/{console.process.pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_preemption_saves_on_sigterm_and_resumes_there(console, tmp_path):
    """Preempted the way the scheduler's reclaim does it (request_stop with final status
    Preempted: SIGTERM and the grace); the script saves on SIGTERM and the new attempt
    resumes from exactly that step."""
    # The first attempt waits at step 15 until it is stopped, so that however slowly the
    # stop arrives on a loaded machine, the job is still running when it does.
    job, steps = submit(console, tmp_path, "ft-preempt", total="60", wait_at="15")
    wait_job(
        console,
        job["id"],
        lambda j: (j["pods"] or [{}])[0].get("progress") and j["pods"][0]["progress"]["step"] >= 14,
        message="progress to step 14",
    )
    code = (
        "from jobs.models import Job; from jobs.actions.stop import request_stop; "
        "from policy.statuses import Actor, JobStatus; "
        f"request_stop(Job.objects.get(pk={job['id']}), actor=Actor.SCHEDULER, "
        "final_status=JobStatus.PREEMPTED, reason='reclaimed by team-b for job b2')"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=_console_env(console),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    done = wait_job(console, job["id"], lambda j: j["status"] in FINAL, timeout=60)
    assert done["status"] == "Completed", (done["status_reason"], done["events"])
    pairs = without_queue(transitions(done))
    assert pairs[3:5] == [("Running", "Preempted"), ("Preempted", "Pending")], (
        pairs,
        done["events"],
    )
    (record,) = done["restarts"]
    assert record["kind"] == "preemption" and record["restarts_used"] == 0
    assert done["preemption_count"] == 1 and done["restart_count"] == 0
    assert done["pods"][0]["status"] == "Resource Preempted"
    rows = check_steps(steps, 60)
    stopped_at = max(step for attempt, step, _ in rows if attempt == 1)
    # Saved on SIGTERM at the step it had reached: nothing is redone.
    assert done["resume_from"].endswith(f"step-{stopped_at}")
    assert min(step for attempt, step, _ in rows if attempt == 2) == stopped_at + 1
