"""A declared output folder end to end (issue 32, item 2; docs/results.md): the real console
(live server, API) and the real agent (process runtime) running `examples/partitioned.py`
with `result_output_dir`. The accepted partitions land in that folder of the workspace's
area (staging stays beside the checkpoint folder), the result is accepted and its files
are served from there; a job stopped halfway and Restarted resumes into the same folder
and ends with 8 partitions of distinct ids. Without the feature the field did not exist
and the result always lay in `<checkpoint folder>/output/result/`."""

import hashlib
from pathlib import Path

import pytest

from jobs.models import Job, ResultUnit
from tests.agents.agentproc import registered, wait_for
from tests.results.test_results_e2e import _api, _finished, _ids, _submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _area(tmp_path: Path, agent: str, job: Job) -> Path:
    return tmp_path / agent / "checkpoints" / f"ws-{job.workspace_id}"


def _served_ids(live_server, token: str, job_id: int) -> list[int]:
    ids: list[int] = []
    report = _api(live_server, token, "GET", f"/jobs/{job_id}/result").json()
    for entry in report["files"]:
        got = _api(live_server, token, "GET", f"/jobs/{job_id}/result/files/{entry['path']}")
        assert got.status_code == 200, got.text
        assert hashlib.sha256(got.content).hexdigest() == entry["sha256"]
        ids += _ids(got.content.decode())
    return ids


def test_units_land_in_the_declared_folder_and_are_served_from_it(
    agents, live_server, api_token, quota, tmp_path
):
    agent = agents("output-clean")
    registered("output-clean")
    job_id = _submit(
        live_server, api_token, quota, checkpoint_dir="runs/a", result_output_dir="results/a"
    )
    job = _finished(job_id)
    assert job.status == "Completed", job.status_reason
    assert "result accepted (8/8 partitions, 4,000 items)" in job.status_reason
    area = _area(tmp_path, "output-clean", job)
    declared = area / "results" / "a"
    assert sorted(p.name for p in declared.glob("p*.csv")) == [f"p{i}.csv" for i in range(1, 9)]
    assert (declared / ".accepted" / "p1.json").is_file()
    assert not (area / "runs" / "a" / "output" / "result").exists()
    staging = area / "runs" / "a" / "output" / f"job-{job_id}" / "attempt-1"
    assert sorted(p.name for p in (staging / ".accepted").iterdir())[0] == "p1.json.promoted"
    shown = _api(live_server, api_token, "GET", f"/jobs/{job_id}").json()
    assert shown["result"]["output_dir"] == "results/a"
    ids = _served_ids(live_server, api_token, job_id)
    assert sorted(ids) == list(range(1, 4001))
    assert agent.terminate() == 0, agent.output()


def test_a_restart_of_a_stopped_run_resumes_into_the_same_declared_folder(
    agents, live_server, api_token, quota, tmp_path
):
    agent = agents("output-restart")
    registered("output-restart")
    job_id = _submit(
        live_server, api_token, quota, env={"UNIT_DELAY": "0.4"}, result_output_dir="results/b"
    )
    wait_for(
        lambda: ResultUnit.objects.filter(job_id=job_id).count() >= 3,
        "3 partitions accepted",
        timeout=60,
    )
    stopped = _api(live_server, api_token, "POST", f"/jobs/{job_id}/stop")
    assert stopped.status_code in (200, 202), stopped.text
    first = _finished(job_id)
    assert first.status == "Stopped", first.status_reason
    kept = ResultUnit.objects.filter(job_id=job_id).count()
    assert 3 <= kept < 8

    restarted = _api(live_server, api_token, "POST", f"/jobs/{job_id}/restart")
    assert restarted.status_code == 201, restarted.text
    again = restarted.json()["id"]
    assert restarted.json()["result"]["output_dir"] == "results/b"
    job = _finished(again)
    assert job.status == "Completed", job.status_reason
    made_by = dict(ResultUnit.objects.filter(job_id=again).values_list("unit", "attempt"))
    assert len(made_by) == 8
    declared = _area(tmp_path, "output-restart", job) / "results" / "b"
    assert len(list(declared.glob("p*.csv"))) == 8
    ids = _served_ids(live_server, api_token, again)
    assert len(ids) == 4000 and sorted(set(ids)) == list(range(1, 4001))
    assert agent.terminate() == 0, agent.output()
