"""The preflight (docs/results.md, "Before a long run"): the workers of a run starting
from nothing (no checkpoint to resume) first run
their command with RUN_PREFLIGHT=1 for at most `result_preflight_seconds`; it passes when it
exits 0 or accepts a unit (in a folder of its own, never promoted), and then the run
starts; otherwise the worker exits 3 "[preflight] failed: …", never retried.

The wrapper script on its own (every outcome, and that a preflight past its limit is killed
whole), and the whole path: a submission through the API, the scheduler, the real agent."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from jobs.models import Job
from policy.faulttolerance.classify import Verdict, classify
from policy.statuses import JobStatus
from protocol import preflight
from protocol.agent import WorkerSpec
from tests.agents.agentproc import (
    agents,  # noqa: F401 - the fixture (F811 below: pytest injects it by name)
    registered,
    stored_lines,
    wait_for,
)
from tests.api.conftest import client_for, post


def _spec(**fields) -> WorkerSpec:
    base = {"pod_id": 1, "job_id": 1, "attempt": 1, "rank": 0, "world_size": 1,
            "image": "i", "command": "c", "preflight_seconds": 30}  # fmt: skip
    return WorkerSpec(**{**base, **fields})


def test_only_a_run_starting_from_nothing_has_one():
    assert preflight.wanted(_spec())
    assert not preflight.wanted(_spec(preflight_seconds=None))
    assert preflight.wanted(_spec(attempt=2))  # restarted before its first save
    assert not preflight.wanted(_spec(attempt=2, resume_from="/ckpt/job-1/step-5"))


def _run(tmp_path: Path, command: str, seconds: int = 2) -> tuple[int, list[str]]:
    staging = tmp_path / "output" / "job-1" / "attempt-1"
    (staging / ".accepted").mkdir(parents=True)
    env = {
        "PATH": os.environ["PATH"],
        "OUTPUT_DIR": str(staging),
        preflight.COMMAND_ENV: command,
    }
    done = subprocess.run(
        ["/bin/sh", "-c", preflight.wrapped(seconds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout.splitlines()


def test_a_quick_preflight_that_exits_0_lets_the_run_start(tmp_path):
    code, lines = _run(
        tmp_path,
        'if [ "$RUN_PREFLIGHT" = 1 ]; then echo "checking $OUTPUT_DIR"; '
        "else echo real-run; exit 7; fi",
    )
    assert code == 7  # the run's own exit, in the same process
    assert lines[0] == "[preflight] the command with RUN_PREFLIGHT=1, at most 2 s"
    assert lines[1].startswith("checking ") and lines[1].endswith("attempt-1.preflight")
    assert lines[2].startswith("[preflight] passed in about ")
    assert lines[2].endswith("(exit 0, 0 unit(s) accepted); the run starts")
    assert lines[3:] == ["real-run"]
    assert sorted(p.name for p in (tmp_path / "output" / "job-1").iterdir()) == ["attempt-1"]


def test_a_unit_accepted_before_the_limit_passes_and_the_rest_is_killed(tmp_path):
    pid_file = tmp_path / "preflight.pid"
    code, lines = _run(
        tmp_path,
        'if [ "$RUN_PREFLIGHT" = 1 ]; then '
        'echo \'{"unit": "p1"}\' > "$OUTPUT_DIR/.accepted/p1.json"; '
        f"sleep 300 & echo $! > {pid_file}; wait; "
        "else echo real-run; fi",
    )
    assert code == 0 and lines[-1] == "real-run"
    assert "(exit 137, 1 unit(s) accepted); the run starts" in lines[-2]
    sleeper = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{sleeper}").exists() or _zombie(sleeper)  # killed with its session
    # The preflight's unit is not the run's: its folder is gone, the staging folder empty.
    assert list((tmp_path / "output" / "job-1" / "attempt-1" / ".accepted").iterdir()) == []


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ('[ "$RUN_PREFLIGHT" = 1 ] && exit 2; echo real-run', 2),  # failed at once
        ('[ "$RUN_PREFLIGHT" = 1 ] && sleep 300; echo real-run', 137),  # no unit in time
    ],
    ids=["exits-2", "hangs"],
)
def test_a_failed_preflight_never_starts_the_run(tmp_path, command, code):
    exit_code, lines = _run(tmp_path, command)
    assert exit_code == preflight.FAILED_EXIT
    assert "real-run" not in lines
    assert lines[-1].startswith(f"[preflight] failed: exit {code} after about ")
    assert lines[-1].endswith("no unit accepted; the run was not started")
    verdict, rule = classify(exit_code, lines[-1])
    assert (verdict, rule) == (Verdict.NO_RETRY, "preflight failed")


def _submit(researcher, command: str, **extra) -> Job:
    body = {
        "quota": "team-a",
        "image": "busybox",
        "command": command,
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        "result_preflight_seconds": 10,
        **extra,
    }
    response = post(client_for(researcher), "/api/v1/jobs", body)
    assert response.status_code == 201, response.content[:400]
    assert response.json()["result"]["preflight_seconds"] == 10
    return Job.objects.get(pk=response.json()["id"])


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_job_passes_its_preflight_and_runs(agents, researcher, workspace, quota):  # noqa: F811
    agents("n-pre")
    registered("n-pre")
    job = _submit(researcher, 'if [ "$RUN_PREFLIGHT" = 1 ]; then echo dry; else echo wet; fi')
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, "completion")
    lines = wait_for(lambda: (s := stored_lines(job.pods.get())) and "wet" in s and s, "log")
    assert lines.index("dry") < lines.index("wet")
    assert any(line.startswith("[preflight] passed in about ") for line in lines)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_failed_preflight_fails_the_job_without_a_restart(
    agents,  # noqa: F811
    researcher,
    workspace,
    quota,
):
    agents("n-pre-bad")
    registered("n-pre-bad")
    job = _submit(
        researcher,
        '[ "$RUN_PREFLIGHT" = 1 ] && exit 2; echo should-not-run',
        fault_tolerance=True,
    )
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.FAILED, "the failure")
    job.refresh_from_db()
    assert job.restart_count == 0, job.status_reason
    assert "[preflight] failed: exit 2 after about " in job.status_reason, job.status_reason
    assert "should-not-run" not in stored_lines(job.pods.get())
