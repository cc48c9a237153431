"""Issue 9's "done when", as a user would try it, on the real console (`manage.py
run_console`: web server, scheduler, monitors and its local agent), over HTTP.

Submitted together: a worker printing NUL bytes (and exiting non-zero), a training script
whose progress phase holds a NUL, and a job with a 280-character env name. Right after
them, an ordinary job on the same node. The ordinary job completes with all its lines; the
hostile ones end in a final status with a reason, or are refused with a 400; the server logs
no 500. (The old code: every log batch and heartbeat of the node failed with 500, nothing
on it launched or ended again, and the 280-character name was accepted and stuck.)
"""

import sys

import pytest

from tests.e2e.conftest import ROOT, RunningConsole, start_console, wait_for

pytestmark = pytest.mark.e2e

FINAL = {"Completed", "Failed", "Stopped", "Preempted", "Terminated"}
NUL = "\u2400"
IMAGE_LINE = (
    "[agent] process runtime: image 'busybox' is ignored; the command runs directly on this host"
)


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """A console of its own: its log must show no 500 of anyone else's test."""
    with start_console(tmp_path_factory.mktemp("done-when")) as running:
        yield running


def submit(console: RunningConsole, **fields):
    body = {
        "quota": "vision-h200",
        "image": "busybox",
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        **fields,
    }
    return console.api().post(f"{console.url}/api/v1/jobs", json=body, timeout=10)


def job(console: RunningConsole, job_id: int) -> dict:
    response = console.api().get(f"{console.url}/api/v1/jobs/{job_id}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def finished(console: RunningConsole, job_id: int) -> dict:
    return wait_for(
        lambda: (body := job(console, job_id))["status"] in FINAL and body,
        90,
        message=f"job {job_id} to finish",
    )


def lines(console: RunningConsole, job_id: int) -> list[str]:
    texts: list[str] = []
    after = -1
    while True:
        response = console.api().get(
            f"{console.url}/api/v1/jobs/{job_id}/logs?after={after}&limit=1000", timeout=10
        )
        assert response.status_code == 200, response.text
        page = response.json()
        texts += [line["text"] for line in page["lines"]]
        if not page["lines"]:
            return texts
        after = page["next_after"]


def test_hostile_jobs_never_stop_an_ordinary_job_on_the_same_node(console):
    nul_printer = submit(
        console,
        name="nul-printer",
        command="printf 'before\\n'; printf 'a\\000b\\n'; printf 'tail \\000\\n'; exit 3",
    )
    script = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from agents.sdk import progress; "
        "progress(1, 2, phase='warm\\x00up'); time.sleep(8); progress(2, 2, phase='done')"
    )
    nul_phase = submit(console, name="nul-phase", command=f'{sys.executable} -c "{script}"')
    long_env = submit(console, name="long-env", command="env", env={"A" * 280: "1"})
    ordinary = submit(
        console,
        name="ordinary",
        command='for i in $(seq 1 300); do echo "ordinary $i"; done',
    )

    assert long_env.status_code == 400
    error = long_env.json()["error"]
    assert (error["code"], error["field"]) == ("validation_error", "env")
    assert "longer than 255 characters" in error["message"]
    for response in (nul_printer, nul_phase, ordinary):
        assert response.status_code == 201, response.text

    done = finished(console, ordinary.json()["id"])
    assert done["status"] == "Completed", done
    wait_for(lambda: len(lines(console, done["id"])) == 301, 30, message="every line of the job")
    assert lines(console, done["id"]) == [IMAGE_LINE, *(f"ordinary {i}" for i in range(1, 301))]

    printed = finished(console, nul_printer.json()["id"])
    assert printed["status"] == "Failed"
    assert printed["status_reason"] == f"worker 0 exited 3: tail {NUL}"
    assert lines(console, printed["id"])[1:] == ["before", f"a{NUL}b", f"tail {NUL}"]

    def phase() -> str:
        pods = job(console, nul_phase.json()["id"])["pods"]
        return ((pods[0].get("progress") or {}) if pods else {}).get("phase", "")

    wait_for(lambda: phase() == f"warm{NUL}up", 60, message="the phase, NUL shown as ␀")
    phased = finished(console, nul_phase.json()["id"])
    assert phased["status"] == "Completed", phased
    assert phased["pods"][0]["progress"]["step"] == 2

    log = console.output()
    assert '" 500 ' not in log and "Internal Server Error" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
