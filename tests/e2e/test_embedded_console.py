"""The embedded console end to end: `make run`'s processes, driven over HTTP.

A job submitted through the API and one through the HTML form both reach Completed on the
local agent, with their output in order and exactly once; a job that exits 3 ends Failed
with exit code 3; Stop on a running job ends Stopped; the console stops cleanly.
"""

import re

import pytest
import requests

from tests.e2e.conftest import RunningConsole, wait_for

pytestmark = pytest.mark.e2e

FINAL = {"Completed", "Failed", "Stopped", "Preempted", "Terminated"}


def submit(console: RunningConsole, **fields) -> dict:
    body = {
        "quota": "vision-h200",
        "image": "busybox:latest",
        "workers": 1,
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        **fields,
    }
    response = console.api().post(f"{console.url}/api/v1/jobs", json=body, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


def wait_status(console: RunningConsole, job_id: int, statuses: set[str], timeout=60) -> dict:
    api = console.api()

    def current():
        job = api.get(f"{console.url}/api/v1/jobs/{job_id}", timeout=10).json()
        return job if job["status"] in statuses else None

    return wait_for(current, timeout, message=f"job {job_id} never reached {statuses}")


def all_log_lines(console: RunningConsole, job_id: int) -> list[str]:
    api = console.api()
    lines, after = [], None
    while True:
        params = {"limit": 1000} | ({"after": after} if after is not None else {})
        page = api.get(f"{console.url}/api/v1/jobs/{job_id}/logs", params=params, timeout=10)
        assert page.status_code == 200, page.text
        batch = page.json()["lines"]
        if not batch:
            return lines
        lines += [entry["text"] for entry in batch]
        after = batch[-1]["seq"]


def test_api_job_runs_to_completed_with_ordered_logs(running_console):
    command = "for i in $(seq 1 200); do echo api-line-$i; done"
    job = submit(running_console, name="api:job", command=command)
    done = wait_status(running_console, job["id"], FINAL)
    assert done["status"] == "Completed", done
    assert done["exit_code"] == 0
    assert done["pods"][0]["status"] == "Succeeded"
    assert done["pods"][0]["node"] == "local-gpu-0"

    def logs_complete():
        lines = [line for line in all_log_lines(running_console, job["id"]) if "api-line-" in line]
        return lines if len(lines) >= 200 else None

    lines = wait_for(logs_complete, 20, message="log lines did not all arrive")
    assert lines == [f"api-line-{i}" for i in range(1, 201)]


def test_job_exiting_3_ends_failed_with_exit_code(running_console):
    job = submit(running_console, name="fails", command="echo about to fail; exit 3")
    done = wait_status(running_console, job["id"], FINAL)
    assert done["status"] == "Failed"
    assert done["exit_code"] == 3
    assert "exited 3" in done["status_reason"]


def test_stop_on_running_job_ends_stopped(running_console):
    job = submit(running_console, name="sleeper", command="echo started; sleep 600")
    wait_status(running_console, job["id"], {"Running"})
    response = running_console.api().post(
        f"{running_console.url}/api/v1/jobs/{job['id']}/stop", timeout=10
    )
    assert response.status_code == 200, response.text
    done = wait_status(running_console, job["id"], FINAL, timeout=30)
    assert done["status"] == "Stopped"
    assert done["pods"][0]["status"] == "Stopped"


def login(console: RunningConsole) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{console.url}/login/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = session.post(
        f"{console.url}/login/",
        data={
            "username": console.creds["researcher_username"],
            "password": console.creds["researcher_password"],
            "csrfmiddlewaretoken": token,
        },
        headers={"Referer": f"{console.url}/login/"},
        timeout=10,
    )
    assert response.status_code == 200 and "logout" in response.text.lower(), response.text
    return session


def test_form_job_completes_and_detail_page_shows_logs_once(running_console):
    session = login(running_console)
    form = session.get(f"{running_console.url}/jobs/new/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    quota_id = re.search(r'<option value="(\d+)"[^>]*>[^<]*vision-h200', form.text).group(1)
    response = session.post(
        f"{running_console.url}/jobs/new/",
        data={
            "csrfmiddlewaretoken": token,
            "name": "form-job",
            "quota": quota_id,
            "image": "busybox:latest",
            "command": "for i in 1 2 3 4 5; do echo form-line-$i; done",
            "workers": "1",
            "gpus_per_worker": "1",
            "cpus_per_worker": "1",
            "memory_gb_per_worker": "1",
            "priority": "1",
            "idle_resources": "Off",
            "env": "",
        },
        headers={"Referer": f"{running_console.url}/jobs/new/"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    match = re.search(r"/jobs/(\d+)/$", response.url)
    assert match, response.url
    job_id = int(match.group(1))
    done = wait_status(running_console, job_id, FINAL)
    assert done["status"] == "Completed"

    def detail_with_logs():
        html = session.get(f"{running_console.url}/jobs/{job_id}/", timeout=10).text
        return html if "form-line-5" in html else None

    html = wait_for(detail_with_logs, 20, message="logs not on the detail page")
    positions = [html.index(f"form-line-{i}") for i in range(1, 6)]
    assert positions == sorted(positions)
    for i in range(1, 6):
        assert html.count(f"form-line-{i}") == 1
    assert "Completed" in html
