"""The program's side and the agent's side of accepted units (agents.sdk, protocol.outputs,
docs/results.md): accept() writes the manifest last; the agent verifies and promotes whole
units only, never a partial one, a link, or a second version of an accepted unit."""

import json
import os
import signal

import pytest

from agents import sdk
from protocol.outputs import (
    output_paths,
    promote,
    promoted_units,
    result_units,
    write_accepted_file,
)


@pytest.fixture
def run(tmp_path, monkeypatch):
    paths = output_paths(tmp_path / "job-1", 1, 1)
    paths.staging.mkdir(parents=True)
    monkeypatch.setenv("OUTPUT_DIR", str(paths.staging))
    monkeypatch.delenv("ACCEPTED_UNITS_FILE", raising=False)
    monkeypatch.setenv("PROGRESS_FILE", str(tmp_path / "progress.json"))
    return paths


def _unit(paths, unit: str, text: str = "1\n2\n", items: int = 2) -> dict:
    path = paths.staging / f"{unit}.csv"
    path.write_text(text)
    return sdk.accept(unit, files=[path], items=items)


def test_an_accepted_unit_is_verified_and_promoted_into_the_result(run):
    manifest = _unit(run, "p1")
    assert manifest["files"][0]["path"] == "p1.csv" and manifest["files"][0]["size"] == 4
    (reported,) = promote(run, 1)
    assert (reported.unit, reported.items, reported.conflict) == ("p1", 2, False)
    assert (run.result / "p1.csv").read_text() == "1\n2\n"
    assert not (run.staging / "p1.csv").exists()
    assert sdk.accepted() == {"p1"}  # this attempt's, after promotion too
    assert promote(run, 1) == []  # reported once
    assert [u["unit"] for u in result_units(run.result, 1)] == ["p1"]
    assert [u.unit for u in promoted_units(run)] == ["p1"]  # reported again after a restart


def test_a_unit_whose_files_do_not_match_never_counts(run):
    _unit(run, "p1")
    (run.staging / "p1.csv").write_text("1\n2\n3\n")  # changed after acceptance
    assert promote(run, 1) == []
    (run.staging / "p2.csv").write_text("half")  # a partial unit: no manifest at all
    assert promote(run, 1) == []
    assert not (run.result / "p2.csv").exists()


def test_a_link_is_never_promoted(run, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("1\n2\n")
    _unit(run, "p1")
    (run.staging / "p1.csv").unlink()
    (run.staging / "p1.csv").symlink_to(secret)
    assert promote(run, 1) == []


def test_a_manifest_naming_a_path_outside_is_ignored(run):
    body = {"unit": "p1", "items": 1, "files": [{"path": "../x", "size": 1, "sha256": "0" * 64}]}
    (run.staging / ".accepted").mkdir()
    (run.staging / ".accepted" / "p1.json").write_text(json.dumps(body))
    assert promote(run, 1) == []


def test_the_same_unit_again_is_a_no_op_and_other_checksums_a_conflict(run, tmp_path, monkeypatch):
    _unit(run, "p1")
    promote(run, 1)
    second = output_paths(tmp_path / "job-1", 1, 2)
    second.staging.mkdir(parents=True)
    monkeypatch.setenv("OUTPUT_DIR", str(second.staging))
    _unit(second, "p1")  # the same bytes
    assert promote(second, 2) == []
    _unit(second, "p2")
    _unit(second, "p1", text="other\n", items=1)
    reports = promote(second, 2)
    assert [(r.unit, r.conflict) for r in reports] == [("p2", False), ("p1", True)]
    assert (run.result / "p1.csv").read_text() == "1\n2\n"  # the first stays
    assert (second.staging / ".accepted" / "p1.json.conflict").exists()


def test_a_new_attempt_is_told_what_was_accepted(run, tmp_path, monkeypatch):
    for unit in ("p1", "p2"):
        _unit(run, unit)
    promote(run, 1)
    second = output_paths(tmp_path / "job-1", 1, 2)
    assert write_accepted_file(second) == 2
    monkeypatch.setenv("ACCEPTED_UNITS_FILE", str(second.accepted_file))
    monkeypatch.setenv("OUTPUT_DIR", str(second.staging))
    assert sdk.accepted() == {"p1", "p2"}
    carried = json.loads(second.accepted_file.read_text())["units"]
    assert carried["p1"]["files"][0]["sha256"] == sdk._sha256(run.result / "p1.csv")


def test_phase_keeps_the_last_step_and_stop_requested_follows_sigterm(run, tmp_path):
    sdk.progress(3, 8)
    sdk.phase("write")
    body = json.loads((tmp_path / "progress.json").read_text())
    assert (body["step"], body["total"], body["phase"]) == (3, 8, "write")
    sdk.progress(4, 8)
    assert json.loads((tmp_path / "progress.json").read_text())["phase"] == "write"
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert sdk.stop_requested() is False
        os.kill(os.getpid(), signal.SIGTERM)
        assert sdk.stop_requested() is True
    finally:
        signal.signal(signal.SIGTERM, previous)
        sdk._STOP.update(requested=False, installed=False)
