"""A run is done when its result is accepted (docs/results.md), end to end: the real console
(live server, API), the real agent (process runtime) running `examples/partitioned.py`,
8 partitions of 500 ids.

Without the feature a job that exits 0 after 5 of its 8 partitions is Completed, and a run
killed in partition 6 and restarted writes its first partitions again."""

import hashlib
import sys
from pathlib import Path

import pytest
import requests
from django.conf import settings

from cli.__main__ import main as cli_main
from jobs.models import Job, ResultUnit
from tests.agents.agentproc import registered, wait_for

EXAMPLE = Path(settings.BASE_DIR) / "examples" / "partitioned.py"
FINAL = {"Completed", "Failed", "Stopped"}
CONTRACT = {
    "result_unit": "partition",
    "result_expected_units": "p{1..8}",
    "result_expected_items": 4000,
}

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _api(live_server, token: str, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(
        method,
        f"{live_server.url}/api/v1{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        **kwargs,
    )


def _submit(live_server, token: str, quota, env: dict | None = None, **fields) -> int:
    body = {
        "quota": quota.name,
        "image": "python:3.12",
        "command": f"{sys.executable} {EXAMPLE}",
        "gpus_per_worker": 0,
        "cpus_per_worker": 1,
        "env": {"UNIT_DELAY": "0.05", **(env or {})},
        **CONTRACT,
        **fields,
    }
    response = _api(live_server, token, "POST", "/jobs", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _finished(job_id: int) -> Job:
    return wait_for(
        lambda: (job := Job.objects.get(pk=job_id)).status in FINAL and job,
        f"job {job_id} to end",
        timeout=60,
    )


def _ids(text: str) -> list[int]:
    return [int(line) for line in text.splitlines()]


def test_a_clean_run_is_completed_with_its_result_accepted_and_its_files_verified(
    agents, live_server, api_token, quota, tmp_path, capsys
):
    agent = agents("results-clean")
    registered("results-clean")
    job_id = _submit(live_server, api_token, quota)
    job = _finished(job_id)
    assert job.status == "Completed", job.status_reason
    assert "result accepted (8/8 partitions, 4,000 items)" in job.status_reason

    report = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result").json()
    assert report["state"] == "accepted"
    assert report["units"]["accepted"] == 8
    assert report["units"]["items_accepted"] == 4000
    assert report["units"]["missing"] == [] and report["units"]["conflicts"] == []
    assert report["progress"].endswith("8 of 8 partitions accepted · 4,000 of 4,000 items")
    run = report["run"]
    assert run["run_id"] == f"python-{job_id}" and len(run["config_sha256"]) == 64
    assert run["config"]["result_expected_units"] == "p{1..8}"
    (attempt,) = run["attempts"]
    assert attempt["executable"] == str(EXAMPLE)
    assert attempt["executable_sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert len(attempt["code_version"]) == 40  # this repository's HEAD

    ids: list[int] = []
    assert len(report["files"]) == 8
    for entry in report["files"]:
        got = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result/files/{entry['path']}")
        assert got.status_code == 200, got.text
        assert hashlib.sha256(got.content).hexdigest() == entry["sha256"]
        assert got.headers["X-Checksum-Sha256"] == entry["sha256"]
        ids += _ids(got.content.decode())
    assert sorted(ids) == list(range(1, 4001))

    # The command line: the report, and every file downloaded with its sha256 verified.
    argv = ["--url", live_server.url, "--token", api_token, "result", str(job_id)]
    assert cli_main([*argv, "--download", str(tmp_path / "got")]) == 0
    printed = capsys.readouterr().out
    assert "accepted: result accepted (8/8 partitions, 4,000 items)" in printed
    assert "downloaded 8 files" in printed and "sha256 verified" in printed
    downloaded = [
        n for i in range(1, 9) for n in _ids((tmp_path / "got" / f"p{i}.csv").read_text())
    ]
    assert sorted(downloaded) == list(range(1, 4001))

    listed = _api(live_server, api_token, "GET", "/jobs").json()["jobs"][0]
    assert listed["result_state"] == "accepted"
    assert "8 of 8 partitions accepted" in listed["result_progress"]
    assert agent.terminate() == 0, agent.output()


def test_exit_0_after_5_partitions_is_failed_result_rejected_showing_2500_of_4000(
    agents, live_server, api_token, quota
):
    agent = agents("results-short")
    registered("results-short")
    job_id = _submit(
        live_server,
        api_token,
        quota,
        env={"STOP_AFTER": "5"},
        fault_tolerance=True,
        restart_policy="OnFailure",
    )
    job = _finished(job_id)
    assert job.status == "Failed"
    assert job.restart_count == 0  # fault tolerance never retries result_rejected
    assert job.status_reason.startswith(
        "exited 0 but result rejected: partitions p6, p7, p8 missing; 2,500 of 4,000 items"
    )
    report = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result").json()
    assert (report["state"], report["reason_code"]) == ("rejected", "result_rejected")
    assert report["units"]["missing"] == ["p6", "p7", "p8"]
    assert "5 of 8 partitions accepted · 2,500 of 4,000 items" in report["progress"]
    # The half-written sixth partition is no accepted file: never served.
    missing = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result/files/p6.csv")
    assert missing.status_code == 404
    assert agent.terminate() == 0, agent.output()


def test_partitions_of_another_size_than_the_contract_says_are_rejected_by_name(
    agents, live_server, api_token, quota
):
    """result_items_per_unit: every partition must hold exactly that many items (its
    manifest's count); the program writes 500 ids a partition, the contract asks 400."""
    agent = agents("results-per-unit")
    registered("results-per-unit")
    job_id = _submit(
        live_server, api_token, quota, env={"PARTITIONS": "3"},
        result_expected_units="p{1..3}", result_expected_items=None, result_items_per_unit=400,
    )  # fmt: skip
    job = _finished(job_id)
    assert job.status == "Failed", job.status_reason
    assert job.status_reason.startswith(
        "exited 0 but result rejected: partitions not of 400 items: p1 (500), p2 (500), p3 (500)"
    )
    report = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result").json()
    assert (report["state"], report["reason_code"]) == ("rejected", "result_rejected")
    shown = _api(live_server, api_token, "GET", f"/jobs/{job_id}").json()["result"]
    assert shown["items_per_unit"] == 400
    assert agent.terminate() == 0, agent.output()


def test_killed_in_partition_6_and_restarted_ends_with_4000_distinct_ids(
    agents, live_server, api_token, quota, tmp_path
):
    agent = agents("results-crash")
    registered("results-crash")
    job_id = _submit(
        live_server,
        api_token,
        quota,
        env={"CRASH_IN": "6"},
        fault_tolerance=True,
        restart_policy="OnFailure",
        max_restarts=1,
    )
    job = _finished(job_id)
    assert job.status == "Completed", job.status_reason
    assert (job.attempt, job.restart_count) == (2, 1)
    made_by = dict(ResultUnit.objects.filter(job_id=job_id).values_list("unit", "attempt"))
    assert made_by == {**{f"p{i}": 1 for i in range(1, 6)}, **{f"p{i}": 2 for i in range(6, 9)}}

    ids: list[int] = []
    report = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result").json()
    for entry in report["files"]:
        got = _api(live_server, api_token, "GET", f"/jobs/{job_id}/result/files/{entry['path']}")
        assert hashlib.sha256(got.content).hexdigest() == entry["sha256"]
        ids += _ids(got.content.decode())
    assert len(ids) == 4000 and sorted(set(ids)) == list(range(1, 4001))
    # The killed attempt's partial partition stays in its own staging folder, labelled.
    staging = next((tmp_path / "results-crash" / "checkpoints").rglob("attempt-1"))
    assert len(_ids((staging / "p6.csv").read_text())) == 250
    assert agent.terminate() == 0, agent.output()
