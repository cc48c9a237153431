"""The agent's ledger and counted results (docs/results.md): a worker gets OUTPUT_DIR and
ACCEPTED_UNITS_FILE, its facts are sent until delivered, its units once each, and an exit
is reported only with the last of its units."""

import json
from pathlib import Path

from agents import sdk
from agents.node.ledger import Ledger
from agents.node.runtimes.base import WorkerState
from agents.node.state import StateStore
from protocol import limits
from protocol.agent import WorkerSpec


def _launched(tmp_path, monkeypatch, attempt: int = 1):
    ledger = Ledger(StateStore(tmp_path / "state"))
    spec = WorkerSpec(
        pod_id=7, job_id=3, attempt=attempt, rank=0, world_size=1, image="i",
        command="python3 -c pass",
    )  # fmt: skip
    ledger.record_launch(7, attempt)
    launch, _ = ledger.launch_spec(spec, state_dir=tmp_path / "state", runtime="process", node="n")
    monkeypatch.setenv("OUTPUT_DIR", launch.env["OUTPUT_DIR"])
    monkeypatch.setenv("ACCEPTED_UNITS_FILE", launch.env["ACCEPTED_UNITS_FILE"])
    return ledger, launch


def _accept(count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        path = sdk.output_dir() / f"u{i}.txt"
        path.write_text(str(i))
        sdk.accept(f"u{i}", files=[path], items=1)


def test_an_exit_waits_for_its_last_units_and_facts_go_once(tmp_path, monkeypatch):
    ledger, launch = _launched(tmp_path, monkeypatch)
    assert launch.env["OUTPUT_DIR"].endswith("/output/job-3/attempt-1")
    _accept(limits.RESULT_UNITS_REPORTED + 100)
    ended = {7: WorkerState(pod_id=7, attempt=1, running=False, exit_code=0)}
    reports, exited = ledger.reports(ended, [])
    (first,) = reports
    assert (first.state, len(first.units), exited) == ("running", limits.RESULT_UNITS_REPORTED, [])
    assert first.facts.executable.endswith("python3") and first.facts.result_dir
    ledger.delivered(reports, exited)
    reports, exited = ledger.reports(ended, [])
    (last,) = reports
    assert (last.state, last.exit_code, len(last.units), last.facts) == ("exited", 0, 100, None)
    sent = {u.unit for u in first.units} | {u.unit for u in last.units}
    assert len(sent) == limits.RESULT_UNITS_REPORTED + 100


def test_a_new_attempt_is_told_the_units_accepted_before(tmp_path, monkeypatch):
    ledger, _ = _launched(tmp_path, monkeypatch)
    _accept(3)
    running = {7: WorkerState(pod_id=7, attempt=1, running=True)}
    ledger.delivered(*ledger.reports(running, []))
    _, second = _launched(tmp_path, monkeypatch, attempt=2)
    carried = json.loads(Path(second.env["ACCEPTED_UNITS_FILE"]).read_text())["units"]
    assert sorted(carried) == ["u0", "u1", "u2"]
    assert sdk.accepted() == {"u0", "u1", "u2"}


def test_a_start_the_runtime_refused_is_reported_as_refused(tmp_path, monkeypatch):
    """The docker runtime refuses a resume whose image changed only after the pull
    (WorkerState.ended_by): the exit report says so, as for a refusal before the start."""
    ledger, _ = _launched(tmp_path, monkeypatch)
    refused = WorkerState(
        pod_id=7, attempt=1, running=False, error="launch failed: resume refused: x",
        ended_by="resume_refused",
    )  # fmt: skip
    (report,), exited = ledger.reports({7: refused}, [])
    assert (report.state, report.exit_code, report.ended_by, exited) == (
        "exited",
        None,
        "resume_refused",
        [7],
    )
    assert report.error == "launch failed: resume refused: x"
