"""Ctrl-C stops the embedded console cleanly: running workers get SIGTERM (and their grace),
the console records their end, and every process exits."""

import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import start_console, wait_for

pytestmark = pytest.mark.e2e


def test_ctrl_c_stops_agent_workers_and_console(tmp_path):
    marker = tmp_path / "got-term"
    tag = f"shutdown-probe-{time.monotonic_ns()}"
    with start_console(tmp_path / "var") as console:
        api = console.api()
        command = (
            f"trap 'echo term > {marker}; exit 0' TERM; echo ready; "
            f"while true; do sleep 0.2; done # {tag}"
        )
        response = api.post(
            f"{console.url}/api/v1/jobs",
            json={
                "quota": "vision-h200",
                "image": "busybox",
                "command": command,
                "gpus_per_worker": 1,
                "cpus_per_worker": 1,
                "memory_gb_per_worker": 1,
            },
            timeout=10,
        )
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        wait_for(
            lambda: (
                api.get(f"{console.url}/api/v1/jobs/{job_id}", timeout=5).json()["status"]
                == "Running"
            ),
            60,
            message="job never ran",
        )
        console.process.send_signal(signal.SIGINT)
        assert console.process.wait(timeout=60) == 0, console.output()
        assert "Stopped." in console.output()
    assert marker.read_text().strip() == "term"
    leftover = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
    assert leftover.stdout == "", f"worker still running: {leftover.stdout}"
