"""The run's inputs as the agent found them (docs/results.md, "Run identity"): before a
start, the agent fingerprints the job's data folders (every file's path, size and
modification time) into the run facts; a resume whose data folders changed since the run
whose accepted units it carries is refused, like a changed program, so one result never
mixes units made from two datasets."""

import os
import shutil

import pytest

from policy.run_compare import RESOLVED
from protocol.inputs import inputs_facts
from protocol.units import ResumeIdentity, RunFacts, resume_refusal
from tests.agents.agentproc import (
    agents,  # noqa: F401 - the fixture (F811 below: pytest injects it by name)
    registered,
)
from tests.results.test_resume_identity import failed_run, refused_restart


def _dataset(folder, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_700_000_000, 1_700_000_000))


def test_the_fingerprint_follows_the_files_not_where_they_lie(tmp_path):
    first = tmp_path / "node-a" / "ds"
    _dataset(first, {"train/0.bin": "aaaa", "train/1.bin": "bb", "labels.txt": "x\n"})
    facts, note = inputs_facts({"train": str(first)})
    assert note == "" and (facts.inputs_files, facts.inputs_bytes) == (3, 8)
    assert len(facts.inputs_fingerprint) == 64
    # The same data copied with its times to another place (another node): the same value.
    copy = tmp_path / "node-b" / "elsewhere"
    shutil.copytree(first, copy)
    assert inputs_facts({"train": str(copy)})[0] == facts
    # Under another name it is other inputs (DATA_TRAIN is what the program reads).
    assert inputs_facts({"val": str(first)})[0].inputs_fingerprint != facts.inputs_fingerprint


@pytest.mark.parametrize(
    "change",
    [
        lambda ds: (ds / "labels.txt").write_text("xy\n"),  # another size
        lambda ds: os.utime(ds / "labels.txt", (1_800_000_000, 1_800_000_000)),  # rewritten
        lambda ds: _dataset(ds, {"train/2.bin": ""}),  # a file added, even empty
        lambda ds: (ds / "train" / "1.bin").unlink(),  # a file removed
        lambda ds: (ds / "train" / "1.bin").rename(ds / "train" / "9.bin"),  # renamed
    ],
    ids=["size", "mtime", "added", "removed", "renamed"],
)
def test_any_change_of_a_file_changes_it(tmp_path, change):
    ds = tmp_path / "ds"
    _dataset(ds, {"train/0.bin": "aaaa", "train/1.bin": "bb", "labels.txt": "x\n"})
    before = inputs_facts({"train": str(ds)})[0].inputs_fingerprint
    change(ds)
    assert inputs_facts({"train": str(ds)})[0].inputs_fingerprint != before


def test_links_count_by_their_target_and_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    _dataset(outside, {"big.bin": "z" * 1000})
    ds = tmp_path / "ds"
    _dataset(ds, {"a.txt": "a"})
    (ds / "link").symlink_to(outside)
    facts = inputs_facts({"d": str(ds)})[0]
    assert (facts.inputs_files, facts.inputs_bytes) == (2, 1)  # the link, not what it names
    (ds / "link").unlink()
    (ds / "link").symlink_to(tmp_path)
    assert inputs_facts({"d": str(ds)})[0].inputs_fingerprint != facts.inputs_fingerprint


def test_too_many_files_are_not_fingerprinted_and_the_log_says_so(tmp_path):
    ds = tmp_path / "ds"
    _dataset(ds, {f"{i}.txt": "x" for i in range(4)})
    assert inputs_facts({"d": str(ds)}, max_files=4)[1] == ""
    facts, note = inputs_facts({"d": str(ds)}, max_files=3)
    assert facts == RunFacts()
    assert note == (
        "data folders not fingerprinted: more than 3 files (the run identity records no "
        "inputs fingerprint)"
    )


def test_the_rule_and_the_comparison_name_the_data():
    expected = ResumeIdentity(run_id="train-7", carried=2, inputs_fingerprint="a" * 64)
    assert resume_refusal(expected, RunFacts(inputs_fingerprint="a" * 64)) == ""
    assert resume_refusal(expected, RunFacts()) == ""  # no data folders now: not compared
    assert resume_refusal(expected, RunFacts(inputs_fingerprint="b" * 64)).startswith(
        "resume refused: the data folders (fingerprint) aaaaaaaaaaaa → bbbbbbbbbbbb changed "
        "since run train-7; its 2 accepted units were made by the old one."
    )
    assert "inputs_fingerprint" in RESOLVED  # "Compare with run…" shows it


def test_an_agent_sends_the_inputs_fields_only_when_it_found_data():
    """Additive in the protocol: an older console refuses an unknown field."""
    assert RunFacts(code_version="a" * 40).model_dump() == {
        "image_digest": "",
        "executable": "",
        "executable_sha256": "",
        "code_version": "a" * 40,
        "result_dir": "",
    }
    found = RunFacts(inputs_fingerprint="b" * 64, inputs_files=3, inputs_bytes=8)
    assert RunFacts.model_validate_json(found.model_dump_json()) == found


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_restart_after_the_data_changed_is_refused_by_the_agent(
    agents,  # noqa: F811
    researcher,
    workspace,
    quota,
    tmp_path,
):
    agents("n-data")
    node = registered("n-data")
    ds = tmp_path / "n-data" / "checkpoints" / f"ws-{workspace.pk}" / "datasets" / "mnist"
    _dataset(ds, {"labels.txt": "seven\n"})
    # What the original run found and accepted before it failed.
    old = inputs_facts({"mnist": str(ds)})[0].inputs_fingerprint
    original = failed_run(
        researcher, workspace, quota, node, {"inputs_fingerprint": old},
        data={"mnist": "datasets/mnist"},
    )  # fmt: skip
    _dataset(ds, {"labels-v2.txt": "eight\n"})  # the dataset grew meanwhile
    new = inputs_facts({"mnist": str(ds)})[0].inputs_fingerprint

    failed, run = refused_restart(original, researcher)  # placed at once on n-data
    assert failed.status_reason.startswith(
        f"worker 0 not started: resume refused: the data folders (fingerprint) {old[:12]} → "
        f"{new[:12]} changed since run {run}; its 2 accepted partitions were made by the old "
        "one."
    )
