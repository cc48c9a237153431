"""The result's validator (docs/results.md, "The validator"): the pure rule that takes its
outcome, and the agent's side (started once rank 0 exited 0, the worker reported running
until it ended, its outcome reported with the exit, past its time limit killed)."""

import dataclasses
import stat
import time
from datetime import UTC, datetime

from agents.node import validator as node_validator
from agents.node.ledger import Ledger
from agents.node.runtimes.base import WorkerState
from agents.node.state import StateStore
from jobs.actions.results import record_runs, verdict_of
from jobs.models import RunRecord
from policy.results import Contract, judge, validator_problem
from protocol import limits
from protocol.agent import WorkerSpec
from tests.agents.conftest import heartbeat, register
from tests.results.test_console import report, unit

EIGHT = Contract(unit="partition", count=8, ids=tuple(f"p{i}" for i in range(1, 9)), items=4000)
ALL = {f"p{i}": 500 for i in range(1, 9)}
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_the_validator_decides_after_the_units():
    checked = dataclasses.replace(EIGHT, validator="check")
    passed = judge(checked, ALL, validator=(0, "ok"))
    assert passed.reason == "result accepted (8/8 partitions, 4,000 items, validator ok)"
    failed = judge(checked, ALL, validator=(3, "reading p1\n\nbad checksum in p4\n"))
    assert (failed.state, failed.code) == ("rejected", "result_rejected")
    assert failed.reason == "exited 0 but result rejected: validator exited 3: bad checksum in p4"
    silent = judge(checked, ALL, validator=None)  # an older agent never ran it
    assert silent.state == "rejected" and "validator did not report" in silent.reason
    short = judge(checked, {"p1": 500}, validator=(0, ""))
    assert short.reason.startswith("exited 0 but result rejected: partitions p2, p3")


def test_a_validator_alone_is_a_contract():
    alone = Contract.of({"unit": "", "expected_units": "", "validator": "true"})
    assert alone is not None and not alone.counted
    assert judge(alone, {}, validator=(0, "")).reason == "result accepted (validator ok)"
    assert (
        validator_problem(None, "timed out after 600 s")
        == "validator not run: timed out after 600 s"
    )
    assert validator_problem(2, "") == "validator exited 2"


def _ledger(tmp_path, command: str, runtime: str = "process"):
    ledger = Ledger(StateStore(tmp_path / "state"), runtime)
    spec = WorkerSpec(
        pod_id=7, job_id=3, attempt=1, rank=0, world_size=1, image="i",
        command="python3 -c pass", result_validator=command,
    )  # fmt: skip
    ledger.record_launch(7, 1)
    launch, _ = ledger.launch_spec(spec, state_dir=tmp_path / "state", runtime=runtime, node="n")
    return ledger, launch


def _until_exited(ledger, state):
    for _ in range(200):
        reports, exited = ledger.reports(state, [])
        if exited:
            return reports[0]
        assert reports[0].state == "running"  # the validator runs: not reported exited yet
        time.sleep(0.05)
    raise AssertionError("the validator did not end")


def test_rank_0_runs_the_validator_on_a_read_only_result_folder_and_reports_it(tmp_path):
    ledger, _ = _ledger(tmp_path, 'sleep 0.3; echo "in $PWD"; stat -c %a .; exit 4')
    ended = {7: WorkerState(pod_id=7, attempt=1, running=False, exit_code=0)}
    report = _until_exited(ledger, ended)
    result = tmp_path / "state" / "checkpoints" / "job-3" / "output" / "result"
    assert report.validator.exit_code == 4
    assert report.validator.output.splitlines()[-1] == "555"
    assert stat.S_IMODE(result.stat().st_mode) & 0o200  # given back
    # Kept in workers.json: reported again after an agent restart, never run twice.
    again = Ledger(StateStore(tmp_path / "state"), "process")
    assert again.launched[7].validation == {"exit_code": 4, "output": report.validator.output}


def test_no_validator_after_a_failed_exit_and_none_under_docker(tmp_path):
    ledger, _ = _ledger(tmp_path, "exit 0")
    failed = {7: WorkerState(pod_id=7, attempt=1, running=False, exit_code=1)}
    (report,), _ = ledger.reports(failed, [])
    assert (report.state, report.validator) == ("exited", None)
    docker, _ = _ledger(tmp_path / "d", "exit 0", runtime="docker")
    ended = {7: WorkerState(pod_id=7, attempt=1, running=False, exit_code=0)}
    (report,), _ = docker.reports(ended, [])
    assert report.validator.exit_code is None and "docker" in report.validator.output


def test_a_validator_past_its_time_limit_is_killed(tmp_path, monkeypatch):
    folder = tmp_path / "result"
    folder.mkdir()
    running = node_validator.start("echo started; sleep 30", {}, folder, tmp_path / "v.out")
    assert node_validator.poll(running) is None
    time.sleep(0.2)
    later = time.monotonic() + limits.RESULT_VALIDATOR_SECONDS + 1
    outcome = node_validator.poll(running, now=later)
    assert outcome.exit_code is None
    assert outcome.output == f"started\ntimed out after {limits.RESULT_VALIDATOR_SECONDS} s"
    assert running.proc.returncode is not None


def test_the_console_judges_rank_0s_validator_and_shows_it(client, ft_job, researcher):
    """Through the real agent endpoint: the validator's outcome rides on rank 0's exit, is
    stored before the exit is judged, and the job page shows its last lines."""
    node, token = register(client)
    contract = {"unit": "partition", "expected_units": "p1", "validator": "./check.sh"}
    job, (pod,) = ft_job([node], result_contract=contract)
    outcome = {"exit_code": 2, "output": "p1: 10 rows\np1: id 7 twice"}
    heartbeat(client, token, [report(pod, state="exited", units=[unit("p1")], validator=outcome)])
    job.refresh_from_db()
    assert (job.status, job.status_reason) == (
        "Failed",
        "exited 0 but result rejected: validator exited 2: p1: id 7 twice",
    )
    run = RunRecord.objects.get(job=job)
    assert (run.validator_exit_code, run.result_code) == (2, "result_rejected")
    client.force_login(researcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "<code>./check.sh</code>:" in page and "exited 2" in page
    assert "p1: 10 rows\np1: id 7 twice</pre>" in page


def test_an_earlier_attempts_outcome_does_not_judge_a_later_one(client, ft_job):
    node, _ = register(client)
    job, _ = ft_job([node], result_contract={"validator": "./check.sh"})
    contract = Contract.of(job.result_contract)
    record_runs([job])
    RunRecord.objects.filter(job=job).update(
        validator_exit_code=0, validator_output="ok", validator_at=T0, validator_attempt=1
    )
    assert verdict_of(job, contract).reason == "result accepted (validator ok)"
    job.attempt = 2  # restarted by fault tolerance: attempt 2's validator did not report
    assert "validator did not report" in verdict_of(job, contract).reason
