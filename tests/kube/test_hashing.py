"""The controller's content hashing, without an API server (docs/results.md, "Kubernetes";
kube.hashing): one thread, the worker's facts once hashed, a dropped worker's hash
cancelled, the bounds as the agent's, a new controller finding the cache, and where the
folders and the manifest are on the volume."""

import logging
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kube.config import KubeConfig
from kube.hashing import ContentHashing
from protocol import hashing
from protocol.units import RunFacts

WAIT = 10.0


def _until(done, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _ask(hasher: ContentHashing, pod_id: int, folders: dict, manifest: Path) -> RunFacts:
    """Ask as the step does, once per step, until the hash is done."""
    found: list[RunFacts] = []

    def done() -> bool:
        content = hasher.content(pod_id, 7, folders, manifest)
        if content is not None:
            found.append(content)
        return bool(found)

    _until(done, "hashed")
    return found[0]


@pytest.fixture
def data(tmp_path) -> dict[str, str]:
    folder = tmp_path / "vol" / "ws-1" / "ds"
    folder.mkdir(parents=True)
    (folder / "a.bin").write_bytes(b"a" * 100)
    (folder / "b.bin").write_bytes(b"b" * 10)
    return {"train": str(folder)}


def test_none_while_hashing_then_the_facts_and_the_step_woken(tmp_path, data):
    woken = threading.Event()
    hasher = ContentHashing(tmp_path / "var" / "cache.json", woken.set)
    manifest = tmp_path / "out" / "attempt-1.inputs.sha256"
    assert hasher.content(1, 7, data, manifest) is None  # begun, not done
    content = _ask(hasher, 1, data, manifest)
    assert woken.is_set()
    assert content.inputs_sha256 and (content.inputs_files, content.inputs_bytes) == (2, 110)
    assert manifest.read_text().endswith("  train/b.bin\n")
    assert (tmp_path / "var" / "cache.json").exists()  # its folder made
    assert hasher.hashing() == set()
    hasher.stop()


def test_a_worker_no_longer_waiting_has_its_hash_cancelled(tmp_path, data, held_file_hash):
    entered, gate = held_file_hash
    hasher = ContentHashing(None, lambda: None)
    first, second = tmp_path / "1.sha256", tmp_path / "2.sha256"
    assert hasher.content(1, 7, data, first) is None
    assert hasher.content(2, 7, data, second) is None  # queued behind the first
    _until(entered.is_set, "the first hash held")
    assert hasher.hashing() == {1, 2}
    hasher.keep({2})  # the first was stopped meanwhile
    gate.set()
    assert _ask(hasher, 2, data, second).inputs_sha256
    assert not first.exists() and second.exists()
    assert hasher.hashing() == set()
    hasher.stop()


def test_past_a_bound_no_digest_and_the_log_says_why(tmp_path, data, caplog):
    hasher = ContentHashing(None, lambda: None)
    hasher.bounds["max_bytes"] = 50
    with caplog.at_level(logging.INFO, logger="kube.hashing"):
        assert _ask(hasher, 3, data, tmp_path / "m.sha256") == RunFacts()
    assert "kube: job 7 pod 3: data folders' content not hashed: more than 0.0 GB" in caplog.text
    assert not (tmp_path / "m.sha256").exists()
    hasher.stop()


def test_a_new_controller_hashes_again_from_the_cache(tmp_path, data, monkeypatch):
    cache = tmp_path / "var" / "cache.json"
    before = ContentHashing(cache, lambda: None)
    first = _ask(before, 1, data, tmp_path / "m.sha256")
    before.stop()
    read: list = []
    real = hashing.file_sha256
    monkeypatch.setattr(hashing, "file_sha256", lambda p, b: read.append(p) or real(p, b))
    after = ContentHashing(cache, lambda: None)  # the controller restarted
    assert _ask(after, 1, data, tmp_path / "m.sha256") == first
    assert read == []
    after.stop()


def _pod(data: dict | None, attempt: int = 2) -> SimpleNamespace:
    job = SimpleNamespace(pk=7, workspace_id=1, checkpoint_dir="", data=data)
    return SimpleNamespace(pk=3, attempt=attempt, job=job)


def test_the_folders_and_the_manifest_on_the_volume(tmp_path, data):
    config = KubeConfig(api_url="https://k", token="t", checkpoint_root=str(tmp_path / "vol"))
    hasher = ContentHashing(None, lambda: None)
    assert hasher.of(config, _pod({"train": "ds"}), wanted=False) == RunFacts()
    assert hasher.of(config, _pod({}), wanted=True) == RunFacts()
    assert hasher.of(config, _pod({"train": "missing"}), wanted=True) == RunFacts()
    assert hasher.of(config, _pod({"train": "../../../etc"}), wanted=True) == RunFacts()
    assert hasher.of(config, _pod({"train": "ds"}), wanted=True) is None
    _until(lambda: hasher.of(config, _pod({"train": "ds"}), wanted=True), "hashed")
    staging = tmp_path / "vol" / "ws-1" / "job-7" / "output" / "job-7" / "attempt-2"
    assert staging.with_name("attempt-2.inputs.sha256").read_text().endswith("  train/b.bin\n")
    hasher.stop()
