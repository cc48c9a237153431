"""The agent's ledger on disk (agents.node.state): `workers.json` for the pods not finished,
`finished.jsonl` appended for the finished ones. What a restart reads back after every
order of writes a crash can cut, and what a launch or an exit writes."""

import json
import os

import pytest

from agents.node import state
from agents.node.state import AgentConfigError, LaunchRecord, StateStore


def _finished(attempt: int = 1) -> LaunchRecord:
    return LaunchRecord(attempt=attempt, finished=True, final={"exit_code": 0, "error": ""})


def _reloaded(tmp_path) -> dict[int, LaunchRecord]:
    return StateStore(tmp_path).load_launched()


def test_a_restart_reads_back_every_pod_finished_or_not(tmp_path):
    store = StateStore(tmp_path)
    launched = {1: _finished(), 2: _finished(2), 3: LaunchRecord(attempt=1), 4: _finished()}
    store.save_launched(launched)
    assert _reloaded(tmp_path) == launched
    live = json.loads(store.workers_path.read_text())["launched"]
    assert list(live) == ["3"]  # workers.json holds only the pod not finished
    assert len(store.finished_path.read_bytes().splitlines()) == 3


def test_a_launch_appends_nothing_and_an_exit_appends_one_line(tmp_path):
    store = StateStore(tmp_path)
    launched = {i: _finished() for i in range(50)}
    store.save_launched(launched)
    size = store.finished_path.stat().st_size
    launched[100] = LaunchRecord(attempt=1)  # a launch
    store.save_launched(launched)
    assert store.finished_path.stat().st_size == size
    launched[100].finished = True  # its exit was taken
    store.save_launched(launched)
    lines = store.finished_path.read_bytes().splitlines()
    assert len(lines) == 51 and json.loads(lines[-1])["pod_id"] == 100
    assert json.loads(store.workers_path.read_text()) == {"launched": {}}
    assert _reloaded(tmp_path) == launched


def test_a_crash_between_the_two_writes_reports_the_exit_again(tmp_path, monkeypatch):
    """The finished line is written, workers.json is not: the pod reads back unfinished
    (in both files, the later one wins), so its exit is reported again; it is never in
    neither file, so it is never forgotten and launched a second time."""
    store = StateStore(tmp_path)
    launched = {7: LaunchRecord(attempt=1)}
    store.save_launched(launched)
    launched[7].finished = True

    def crash(path, payload):
        raise OSError("the agent died here")

    monkeypatch.setattr(state, "_write_private", crash)
    with pytest.raises(OSError):
        store.save_launched(launched)
    monkeypatch.undo()
    assert len(store.finished_path.read_bytes().splitlines()) == 1
    assert _reloaded(tmp_path) == {7: LaunchRecord(attempt=1)}


def test_a_finished_pod_listed_again_reads_back_unfinished(tmp_path):
    store = StateStore(tmp_path)
    launched = {5: _finished()}
    store.save_launched(launched)
    launched[5].finished = False  # the console still lists it (Ledger.relist)
    store.save_launched(launched)
    assert _reloaded(tmp_path)[5].finished is False
    launched[5].finished = True  # reported again and taken
    store.save_launched(launched)
    assert _reloaded(tmp_path)[5].finished is True
    assert len(store.finished_path.read_bytes().splitlines()) == 2  # the later line wins


def test_the_finished_lines_are_rewritten_with_the_kept_pods_only(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "KEEP_FINISHED", 3)
    store = StateStore(tmp_path)
    launched: dict[int, LaunchRecord] = {}
    for pod_id in range(20):
        launched[pod_id] = _finished()
        store.save_launched(launched)
        assert len(store.finished_path.read_bytes().splitlines()) <= 2 * 3
    assert sorted(launched) == [17, 18, 19]
    assert sorted(_reloaded(tmp_path)) == [17, 18, 19]


def test_a_torn_last_line_is_skipped_and_a_bad_line_before_it_refused(tmp_path):
    store = StateStore(tmp_path)
    launched = {1: _finished(), 2: LaunchRecord(attempt=1)}
    store.save_launched(launched)
    with store.finished_path.open("ab") as f:
        f.write(b'{"pod_id": 2, "attem')  # a crash mid-append: pod 2 is in workers.json
    assert _reloaded(tmp_path) == launched
    with store.finished_path.open("ab") as f:
        f.write(b"\n" + json.dumps({"pod_id": 3, "attempt": 1, "finished": True}).encode())
    with pytest.raises(AgentConfigError, match=r"finished\.jsonl"):
        _reloaded(tmp_path)  # not the last line: refuse to guess


def test_a_failed_append_is_cut_off_again(tmp_path, monkeypatch):
    store = StateStore(tmp_path)
    launched = {1: _finished(), 2: LaunchRecord(attempt=1)}
    store.save_launched(launched)
    size = store.finished_path.stat().st_size
    launched[2].finished = True

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        store.save_launched(launched)
    monkeypatch.undo()
    assert store.finished_path.stat().st_size == size
    assert _reloaded(tmp_path)[2].finished is False  # still unfinished: reported again
    store.save_launched(_reloaded(tmp_path) | {2: launched[2]})  # the next save succeeds
    assert _reloaded(tmp_path)[2].finished is True


def test_a_ledger_of_an_older_agent_is_read_and_moved_over(tmp_path):
    """An older agent kept finished pods in workers.json: they read back as they were,
    and the next save appends them to finished.jsonl."""
    older = {"1": {"attempt": 1, "finished": True}, "2": {"attempt": 3}}
    (tmp_path / "workers.json").write_text(json.dumps({"launched": older}))
    store = StateStore(tmp_path)
    launched = store.load_launched()
    assert launched == {1: LaunchRecord(attempt=1, finished=True), 2: LaunchRecord(attempt=3)}
    store.save_launched(launched)
    assert list(json.loads(store.workers_path.read_text())["launched"]) == ["2"]
    assert _reloaded(tmp_path) == launched
