"""The console's side of counted results through the real agent endpoint and the API
(docs/results.md): units stored once, conflicts kept and shown, a stale worker not heard,
a new unit is progress for the hang judge, exit 0 judged against the contract; the result
API's access and its file endpoint's refusals."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from jobs.models import AttemptFacts, Job, Pod, PodDesired, ResultConflict, ResultUnit, RunRecord
from policy.faulttolerance.policy import FtConfig
from tests.agents.conftest import heartbeat, register

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HANG = FtConfig(enabled=True, hang_detection=True, hang_timeout=600)
CONTRACT = {"unit": "partition", "expected_units": "p{1..3}", "expected_items": 30}
SHA = "a" * 64


def unit(name: str, sha: str = SHA, items: int = 10) -> dict:
    return {
        "unit": name,
        "items": items,
        "files": [{"path": f"{name}.csv", "size": 3, "sha256": sha}],
    }


def report(pod, state: str = "running", **extra) -> dict:
    body = {"pod_id": pod.pk, "attempt": pod.attempt, "state": state, **extra}
    return body | ({"exit_code": 0} if state == "exited" else {})


def test_units_are_stored_once_and_other_checksums_are_a_conflict(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract=CONTRACT)
    for _ in range(2):  # the same units again: nothing changes
        response = heartbeat(client, token, [report(pod, units=[unit("p1"), unit("p2")])])
        assert response.status_code == 200
    run = RunRecord.objects.get(job=job)
    assert (run.units_accepted, run.items_accepted, run.conflicts) == (2, 20, 0)
    heartbeat(client, token, [report(pod, units=[unit("p2", sha="b" * 64)])])
    assert ResultUnit.objects.get(job=job, unit="p2").files[0]["sha256"] == SHA  # first stays
    assert list(ResultConflict.objects.filter(job=job).values_list("unit", flat=True)) == ["p2"]
    heartbeat(client, token, [report(pod, state="exited", units=[unit("p3")])])
    job.refresh_from_db()
    assert job.status == "Failed"
    assert job.status_reason == "exited 0 but result rejected: conflicting checksums for p2"
    assert RunRecord.objects.get(job=job).result_code == "result_rejected"


def test_a_complete_result_is_accepted_with_the_last_units_in_the_exit_report(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract=CONTRACT)
    facts = {"executable": "/usr/bin/python3", "executable_sha256": SHA, "code_version": "abc1234"}
    heartbeat(client, token, [report(pod, units=[unit("p1")], facts=facts)])
    last = [unit("p2"), unit("p3")]
    heartbeat(client, token, [report(pod, state="exited", units=last)])
    job.refresh_from_db()
    assert job.status == "Completed"
    assert job.status_reason == ("all workers exited 0; result accepted (3/3 partitions, 30 items)")
    (identity,) = AttemptFacts.objects.filter(job=job)
    assert (identity.executable, identity.code_version) == ("/usr/bin/python3", "abc1234")
    # Immutable: facts reported again (an agent restart) change nothing.
    heartbeat(client, token, [report(pod, facts={**facts, "code_version": "fff0000"})])
    assert AttemptFacts.objects.get(job=job).code_version == "abc1234"


def test_no_contract_is_completed_result_not_checked(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node])
    heartbeat(client, token, [report(pod, state="exited")])
    job.refresh_from_db()
    assert (job.status, job.status_reason) == (
        "Completed",
        "all workers exited 0; result not checked",
    )


def test_a_worker_ordered_away_for_a_restart_is_not_heard(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract=CONTRACT)
    Pod.objects.filter(pk=pod.pk).update(desired=PodDesired.STOP)  # its attempt is over
    heartbeat(client, token, [report(pod, units=[unit("p1")])])
    assert not ResultUnit.objects.filter(job=job).exists()


def test_a_newly_accepted_unit_is_progress_for_the_hang_judge(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], ft=HANG, hang_deadline=T0, result_contract=CONTRACT)
    with time_machine.travel(T0 + timedelta(seconds=100), tick=False):
        heartbeat(client, token, [report(pod, units=[unit("p1")])])
    assert Job.objects.get(pk=job.pk).hang_deadline == T0 + timedelta(seconds=700)
    with time_machine.travel(T0 + timedelta(seconds=300), tick=False):
        heartbeat(client, token, [report(pod, units=[unit("p1")])])  # not new: no progress
    assert Job.objects.get(pk=job.pk).hang_deadline == T0 + timedelta(seconds=700)


def test_a_hostile_unit_report_is_refused_alone(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract=CONTRACT)
    bad = {"unit": "p1", "files": [{"path": "../../etc/passwd", "size": 1, "sha256": SHA}]}
    response = heartbeat(client, token, [report(pod, units=[bad])])
    assert response.status_code in (200, 400)
    assert not ResultUnit.objects.filter(job=job).exists()


# -- the result API: access and the file endpoint ---------------------------------------------


@pytest.fixture
def finished(client, ft_job, tmp_path):
    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract=CONTRACT)
    result = tmp_path / "result"
    result.mkdir()
    (result / "p1.csv").write_text("1\n2")
    (tmp_path / "staged.csv").write_text("x\n")
    heartbeat(
        client,
        token,
        [report(pod, units=[unit("p1")], facts={"result_dir": str(result)})],
    )
    return job


def _get(client, token, path):
    return client.get(path, headers={"Authorization": f"Bearer {token}"})


def test_members_read_the_result_and_outsiders_get_404(client, finished, api_token, outsider):
    from accounts.actions import issue_api_token

    body = _get(client, api_token, f"/api/v1/jobs/{finished.pk}/result").json()
    assert body["state"] == "pending"
    assert body["units"]["missing"] == ["p2", "p3"]
    assert body["progress"] == "1 of 3 partitions accepted · 10 of 30 items"
    assert body["files"] == [{"path": "p1.csv", "size": 3, "sha256": SHA, "unit": "p1"}]
    _, foreign = issue_api_token(outsider)
    assert _get(client, foreign, f"/api/v1/jobs/{finished.pk}/result").status_code == 404
    file_url = f"/api/v1/jobs/{finished.pk}/result/files/p1.csv"
    assert _get(client, foreign, file_url).status_code == 404
    got = _get(client, api_token, file_url)
    assert got.status_code == 200 and b"".join(got.streaming_content) == b"1\n2"


@pytest.mark.parametrize("path", ["../staged.csv", "staged.csv", "p9.csv", "%2e%2e/staged.csv"])
def test_only_accepted_files_are_served(client, finished, api_token, path):
    got = _get(client, api_token, f"/api/v1/jobs/{finished.pk}/result/files/{path}")
    assert got.status_code == 404


def test_a_result_folder_the_console_cannot_read_is_409(client, finished, api_token, tmp_path):
    (tmp_path / "result" / "p1.csv").unlink()
    got = _get(client, api_token, f"/api/v1/jobs/{finished.pk}/result/files/p1.csv")
    assert (got.status_code, got.json()["error"]["code"]) == (409, "result_not_reachable")


# -- the job page and the list ------------------------------------------------------------------


def test_the_job_page_and_list_show_the_result_to_members_only(
    client, finished, researcher, colleague, outsider
):
    for user in (researcher, colleague):
        client.force_login(user)
        page = client.get(f"/jobs/{finished.pk}/").content.decode()
        assert 'data-result-state="pending"' in page
        assert "1 of 3 partitions accepted · 10 of 30 items" in page
        assert "<td>p1</td>" in page and "p1.csv" in page
        listed = client.get("/jobs/").content.decode()
        assert "1 of 3 partitions accepted" in listed
    client.force_login(outsider)
    assert client.get(f"/jobs/{finished.pk}/").status_code == 404
    assert "partitions accepted" not in client.get("/jobs/").content.decode()


def test_a_conflict_shows_as_a_warning_on_the_page(client, finished, researcher):
    ResultConflict.objects.create(
        job=finished, unit="p1", digest="d" * 64, files=[], attempt=1, created_at=T0
    )
    client.force_login(researcher)
    page = client.get(f"/jobs/{finished.pk}/").content.decode()
    assert "data-result-conflicts" in page and "Conflicting checksums for p1" in page


def test_a_restart_of_a_rejected_job_carries_its_accepted_units(client, ft_job, researcher):
    from jobs.actions.submit import resubmit_job

    node, token = register(client)
    job, (pod,) = ft_job([node], result_contract=CONTRACT)
    heartbeat(client, token, [report(pod, state="exited", units=[unit("p1"), unit("p2")])])
    job.refresh_from_db()
    assert job.status == "Failed"
    again = resubmit_job(job, user=researcher)
    carried = dict(ResultUnit.objects.filter(job=again).values_list("unit", "attempt"))
    assert carried == {"p1": 1, "p2": 1}
    run = RunRecord.objects.get(job=again)
    assert (run.units_accepted, run.items_accepted) == (2, 20)
    assert run.run_id != RunRecord.objects.get(job=job).run_id
