"""Ctrl-C stops the embedded console cleanly, and it starts again on another port.

Running workers get SIGTERM and the grace a user's Stop gives them; a job without fault
tolerance ends Stopped ("the console was shut down"), never Failed; a job with fault tolerance
is preempted and resumes as a new attempt when the console starts again, which it does on
another port with the same data (the local agent registers again instead of exiting). The
data files are private to the user the jobs run as.
"""

import signal
import stat
import subprocess
import time

import pytest

from tests.e2e.conftest import console_database, start_console, wait_for

pytestmark = pytest.mark.e2e


def _submit(console, **fields) -> int:
    body = {
        "quota": "vision-h200",
        "image": "busybox",
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        **fields,
    }
    response = console.api().post(f"{console.url}/api/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _job(console, job_id) -> dict:
    return console.api().get(f"{console.url}/api/v1/jobs/{job_id}", timeout=5).json()


def test_ctrl_c_stops_jobs_gracefully_and_a_restart_on_another_port_resumes(tmp_path):
    marker = tmp_path / "got-term"
    tag = f"shutdown-probe-{time.monotonic_ns()}"
    var_dir = tmp_path / "var"
    with console_database() as database:
        with start_console(var_dir, database) as console:
            first_url = console.url
            plain = _submit(
                console,
                name="plain",
                command=(
                    f"trap 'echo term > {marker}; exit 0' TERM; echo ready\n"
                    f"while true; do sleep 0.2; done # {tag}"
                ),
            )
            resuming = _submit(
                console,
                name="resuming",
                command=f"trap 'exit 0' TERM\nwhile true; do sleep 0.2; done # {tag}-ft",
                fault_tolerance=True,
            )
            for job_id in (plain, resuming):
                wait_for(
                    lambda job_id=job_id: _job(console, job_id)["status"] == "Running",
                    60,
                    message=f"job {job_id} never ran",
                )
            output = console.output()
            assert "jobs run as local processes under your account" in output
            for name in ("console.sqlite3", "demo-credentials.json"):
                path = var_dir / name
                if path.exists():
                    assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
            assert stat.S_IMODE(var_dir.stat().st_mode) == 0o700

            console.process.send_signal(signal.SIGINT)
            assert console.process.wait(timeout=90) == 0, console.output()
            assert "Stopping 2 running job(s)" in console.output()
            assert "Stopped." in console.output()
        assert marker.read_text().strip() == "term"
        leftover = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
        assert leftover.stdout == "", f"worker still running: {leftover.stdout}"

        # Same data, another port: the agent registers again and the jobs are where Ctrl-C
        # left them.
        with start_console(var_dir, database) as console:
            assert console.url != first_url
            job = _job(console, plain)
            assert job["status"] == "Stopped", job
            assert job["status_reason"].startswith("the console was shut down"), job
            assert job["pods"][0]["status"] == "Stopped"

            def resumed():
                job = _job(console, resuming)
                return job if job["attempt"] == 2 and job["status"] == "Running" else None

            job = wait_for(resumed, 60, message="the fault-tolerant job did not resume")
            assert job["preemption_count"] == 1 and job["restart_count"] == 0, job
