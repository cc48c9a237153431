"""The data folders' content as a run's inputs (docs/results.md, "Run identity"): a job that
asks (`result_inputs_sha256`) has every file of its data folders hashed by the agent before
the start, off its loop, into a `sha256sum` manifest kept with the run; the manifest's
sha256 is the run identity's content digest, and a resume whose content changed is refused
even when every size and time was kept (which the fingerprint cannot see)."""

import hashlib
import os
import shutil
import subprocess
import threading

import pytest
from django.test import Client

from cli.result import _print
from jobs.models import Job
from policy.jobspec import JobSpec
from policy.run_compare import RESOLVED
from protocol import hashing
from protocol.agent import WorkerSpec
from protocol.hashing import Cancelled, HashCache, hash_inputs
from protocol.inputs import inputs_facts, manifest
from protocol.units import ResumeIdentity, RunFacts, resume_refusal
from tests.agents.agentproc import (
    agents,  # noqa: F401 - the fixture (F811 below: pytest injects it by name)
    registered,
    stored_lines,
)
from tests.agents.conftest import heartbeat, register
from tests.api.conftest import client_for, post
from tests.conftest import make_node
from tests.results.test_console import report, unit
from tests.results.test_resume_identity import failed_run, refused_restart

T = 1_700_000_000


def _dataset(folder, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (T, T))


FILES = {"train/0.bin": b"aaaa", "train/1.bin": b"bb", "labels.txt": b"x\n"}


def _hash(folders, tmp_path, cache=None, **bounds):
    said: list[str] = []
    facts, note = hash_inputs(
        {k: str(v) for k, v in folders.items()}, tmp_path / "out" / "attempt-1.inputs.sha256",
        cache=cache or HashCache(tmp_path / "cache.json"), say=said.append,
        cancelled=threading.Event(), **bounds,
    )  # fmt: skip
    return facts, note, said


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_manifest_is_sha256sums_and_its_digest_the_identity(tmp_path):
    mnist = tmp_path / "mnist"
    _dataset(mnist, FILES)
    (mnist / "link").symlink_to("train/0.bin")  # counted by its target's text, not followed
    os.mkfifo(mnist / "pipe")  # no content: left out (a read would block)
    facts, note, said = _hash({"mnist": mnist}, tmp_path)
    text = (tmp_path / "out" / "attempt-1.inputs.sha256").read_bytes()
    assert text.decode().splitlines() == [
        f"{_sha(b'x' + bytes([10]))}  mnist/labels.txt",
        f"{_sha(b'train/0.bin')}  mnist/link",
        f"{_sha(b'aaaa')}  mnist/train/0.bin",
        f"{_sha(b'bb')}  mnist/train/1.bin",
    ]
    assert facts == RunFacts(inputs_sha256=_sha(text), inputs_files=4, inputs_bytes=8)
    assert said == ["hashing inputs: 4 files, 0.0 GB"]
    assert note.startswith("inputs hashed: 4 files, 0.0 GB in 0 s; content sha256 ")
    assert note.endswith(f"manifest {tmp_path / 'out' / 'attempt-1.inputs.sha256'}")
    # sha256sum checks it, from the folder above the data (its files; a link is followed).
    (mnist / "link").unlink()
    (mnist / "pipe").unlink()
    lines = [line for line in text.decode().splitlines() if not line.endswith("/link")]
    (tmp_path / "files.sha256").write_text("\n".join(lines) + "\n")
    subprocess.run(["sha256sum", "--check", "--quiet", "files.sha256"], cwd=tmp_path, check=True)


def test_names_are_escaped_as_sha256sum_escapes_them():
    assert manifest([("d/b", "2" * 64), ("d/a\\b\nc", "1" * 64)]) == (
        b"\\" + b"1" * 64 + b"  d/a\\\\b\\nc\n" + b"2" * 64 + b"  d/b\n"
    )


def test_the_same_bytes_elsewhere_with_other_times_are_the_same_content(tmp_path):
    first = tmp_path / "node-a" / "ds"
    _dataset(first, FILES)
    copy = tmp_path / "node-b" / "elsewhere"
    shutil.copytree(first, copy, copy_function=shutil.copy)  # without its times
    for path in copy.rglob("*"):
        os.utime(path, (T + 86_400, T + 86_400))
    a, _, _ = _hash({"train": first}, tmp_path)
    b, _, _ = _hash({"train": copy}, tmp_path)
    assert a == b and a.inputs_sha256
    # The fingerprint, of paths, sizes and times, sees other inputs.
    assert inputs_facts({"train": str(first)})[0] != inputs_facts({"train": str(copy)})[0]
    # Under another name it is other inputs (DATA_VAL is not DATA_TRAIN).
    assert _hash({"val": first}, tmp_path)[0].inputs_sha256 != a.inputs_sha256


def _rewrite_keeping_size_and_times(path, data: bytes) -> None:
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_byte_changed_with_size_and_times_kept_is_other_content(tmp_path):
    ds = tmp_path / "ds"
    _dataset(ds, FILES)
    cache = HashCache(tmp_path / "cache.json")
    before, _, _ = _hash({"train": ds}, tmp_path, cache)
    fingerprint = inputs_facts({"train": str(ds)})[0]
    _rewrite_keeping_size_and_times(ds / "train" / "0.bin", b"aaab")
    assert inputs_facts({"train": str(ds)})[0] == fingerprint  # blind to it
    # The same cache: a rewritten file is read again (its change time moved).
    after, _, _ = _hash({"train": ds}, tmp_path, cache)
    assert after.inputs_sha256 != before.inputs_sha256
    assert (after.inputs_files, after.inputs_bytes) == (before.inputs_files, before.inputs_bytes)


def test_an_unchanged_file_is_not_read_again(tmp_path, monkeypatch):
    ds = tmp_path / "ds"
    _dataset(ds, FILES)
    first, _, _ = _hash({"train": ds}, tmp_path)  # the cache file is written
    read: list = []
    real = hashing.file_sha256
    monkeypatch.setattr(hashing, "file_sha256", lambda p, b: read.append(p) or real(p, b))
    again, _, _ = _hash({"train": ds}, tmp_path)  # a new agent run: the cache from disk
    assert again == first and read == []
    (ds / "labels.txt").write_bytes(b"y\n")
    _hash({"train": ds}, tmp_path)
    assert read == [ds / "labels.txt"]
    assert oct((tmp_path / "cache.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("bounds", "why"),
    [
        ({"max_files": 2}, "more than 2 files"),
        ({"max_bytes": 7}, "more than 0.0 GB"),
    ],
)
def test_past_a_bound_nothing_is_hashed_and_the_log_says_so(tmp_path, bounds, why):
    ds = tmp_path / "ds"
    _dataset(ds, FILES)
    facts, note, said = _hash({"d": ds}, tmp_path, **bounds)
    assert (facts, said) == (RunFacts(), [])
    assert note == (
        f"data folders' content not hashed: {why} (the run identity records no content sha256)"
    )
    assert not (tmp_path / "out").exists()


def test_a_hash_that_takes_too_long_gives_up(tmp_path):
    ds = tmp_path / "ds"
    _dataset(ds, {"big.bin": b"z" * (3 << 20)})  # three blocks
    ticks = iter(range(0, 1000, 10))  # each look at the clock: 10 s later
    said: list[str] = []
    facts, note = hash_inputs(
        {"d": str(ds)}, tmp_path / "m", cache=HashCache(tmp_path / "c.json"), say=said.append,
        cancelled=threading.Event(), max_seconds=25, now=lambda: next(ticks),
    )  # fmt: skip
    assert facts == RunFacts() and not (tmp_path / "m").exists()
    assert note == (
        "data folders' content not hashed: not done after 25 s (0.0 GB of 0.0 GB hashed) (the "
        "run identity records no content sha256)"
    )


def test_a_stop_ends_the_hash(tmp_path):
    ds = tmp_path / "ds"
    _dataset(ds, FILES)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        hash_inputs(
            {"d": str(ds)}, tmp_path / "m", cache=HashCache(tmp_path / "c.json"),
            say=lambda _line: None, cancelled=stop,
        )  # fmt: skip


def test_the_rule_compares_the_content_before_the_fingerprint():
    expected = ResumeIdentity(
        run_id="train-7", carried=2, inputs_fingerprint="a" * 64, inputs_sha256="c" * 64
    )
    same = RunFacts(inputs_fingerprint="a" * 64, inputs_sha256="c" * 64)
    assert resume_refusal(expected, same) == ""
    changed = RunFacts(inputs_fingerprint="a" * 64, inputs_sha256="d" * 64)
    assert resume_refusal(expected, changed).startswith(
        "resume refused: the data folders (content sha256) cccccccccccc → dddddddddddd "
        "changed since run train-7; its 2 accepted units were made by the old one."
    )
    # The same content copied without its times: the fingerprint differs, the inputs do not.
    assert (
        resume_refusal(expected, RunFacts(inputs_fingerprint="b" * 64, inputs_sha256="c" * 64))
        == ""
    )
    # Not hashed this time (a bound): the fingerprint still speaks.
    assert "(fingerprint)" in resume_refusal(expected, RunFacts(inputs_fingerprint="b" * 64))
    assert "inputs_sha256" in RESOLVED  # "Compare with run…" shows it


def test_the_agent_sends_the_content_only_when_it_hashed_it():
    """Additive in the protocol: an older console refuses an unknown field."""
    assert "inputs_sha256" not in RunFacts(inputs_fingerprint="b" * 64).model_dump()
    hashed = RunFacts(inputs_sha256="c" * 64, inputs_files=3, inputs_bytes=8)
    assert hashed.model_dump() == {
        "image_digest": "", "executable": "", "executable_sha256": "", "code_version": "",
        "inputs_sha256": "c" * 64, "inputs_files": 3, "inputs_bytes": 8, "result_dir": "",
    }  # fmt: skip
    assert RunFacts.model_validate_json(hashed.model_dump_json()) == hashed
    spec = {"pod_id": 1, "job_id": 1, "attempt": 1, "rank": 0, "world_size": 1, "image": "i"}
    assert WorkerSpec(**spec, command="c", hash_inputs=True).hash_inputs
    assert not WorkerSpec(**spec, command="c").hash_inputs  # an older console's


# -- the field, at submission --------------------------------------------------------------

BODY = {
    "quota": "team-a", "image": "busybox", "command": "echo hi", "cpus_per_worker": 1,
    "memory_gb_per_worker": 1, "data": {"mnist": "datasets/mnist"},
}  # fmt: skip


@pytest.mark.django_db
def test_the_api_takes_the_field_and_the_worker_gets_it(researcher, quota):
    make_node()
    response = post(client_for(researcher), "/api/v1/jobs", BODY | {"result_inputs_sha256": True})
    assert response.status_code == 201, response.content[:400]
    assert response.json()["result"]["inputs_sha256"] is True
    job = Job.objects.get(pk=response.json()["id"])
    assert job.result_contract["inputs_sha256"] is True
    assert Job.objects.get(pk=post(client_for(researcher), "/api/v1/jobs", BODY).json()["id"]
                           ).result_contract["inputs_sha256"] is False  # fmt: skip
    assert JobSpec.from_job(job).worker_fields()["hash_inputs"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"result_inputs_sha256": "yes"}, "boolean"),
        ({"result_inputs_sha256": 1}, "boolean"),
        ({"result_inputs_sha256": True, "data": {}}, "Needs data folders"),
    ],
    ids=["a string", "a number", "no data folders"],
)
def test_the_api_names_the_field_of_a_bad_value(researcher, quota, changes, message):
    make_node()
    response = post(client_for(researcher), "/api/v1/jobs", BODY | changes)
    assert response.status_code in (400, 422), response.content[:400]
    error = response.json()["error"]
    assert error["field"] == "result_inputs_sha256", error
    assert message in error["message"], error
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_the_create_page_has_the_box_and_says_what_it_needs(researcher, quota):
    make_node()
    client = Client()
    client.force_login(researcher)
    page = client.get("/jobs/new/").content.decode()
    assert 'name="result_inputs_sha256"' in page and "Hash the data&#x27;s content" in page
    form = {**BODY, "quota": str(quota.pk), "data": "", "result_inputs_sha256": "on"}
    response = client.post("/jobs/new/", form)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert errors["result_inputs_sha256"] == ["Needs data folders: their content is hashed."]
    response = client.post("/jobs/new/", form | {"data": "mnist=datasets/mnist"})
    assert response.status_code == 302, response.context["form"].errors
    assert Job.objects.get().result_contract["inputs_sha256"] is True


# -- a resume, through the real agent ------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_restart_after_a_byte_changed_is_refused_by_the_agent(
    agents,  # noqa: F811
    researcher,
    workspace,
    quota,
    tmp_path,
):
    agents("n-content")
    node = registered("n-content")
    area = tmp_path / "n-content" / "checkpoints" / f"ws-{workspace.pk}"
    ds = area / "datasets" / "mnist"
    _dataset(ds, {"labels.txt": b"seven\n"})
    # What the original run found and accepted before it failed.
    old, _, _ = _hash({"mnist": ds}, tmp_path / "before")
    fingerprint = inputs_facts({"mnist": str(ds)})[0].inputs_fingerprint
    original = failed_run(
        researcher, workspace, quota, node,
        {"inputs_fingerprint": fingerprint, "inputs_sha256": old.inputs_sha256},
        data={"mnist": "datasets/mnist"},
    )  # fmt: skip
    contract = {**original.result_contract, "inputs_sha256": True}
    Job.objects.filter(pk=original.pk).update(result_contract=contract)
    original.refresh_from_db()
    # One byte rewritten meanwhile, its size and times kept: the fingerprint cannot see it.
    _rewrite_keeping_size_and_times(ds / "labels.txt", b"seveN\n")
    assert inputs_facts({"mnist": str(ds)})[0].inputs_fingerprint == fingerprint
    new, _, _ = _hash({"mnist": ds}, tmp_path / "after")

    failed, run = refused_restart(original, researcher)  # placed at once on n-content
    assert failed.status_reason.startswith(
        f"worker 0 not started: resume refused: the data folders (content sha256) "
        f"{old.inputs_sha256[:12]} → {new.inputs_sha256[:12]} changed since run {run}; its 2 "
        "accepted partitions were made by the old one."
    ), failed.status_reason
    # The manifest the agent wrote is kept with the run, beside ACCEPTED_UNITS_FILE.
    kept = area / f"job-{original.pk}" / "output" / f"job-{failed.pk}" / "attempt-1.inputs.sha256"
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == new.inputs_sha256
    lines = stored_lines(failed.pods.get())
    assert "[agent] hashing inputs: 1 file, 0.0 GB" in lines


# -- the identity, shown -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_identity_shows_the_content_digest_everywhere(client, ft_job, researcher, capsys):
    node, token = register(client)
    contract = {"unit": "partition", "expected_units": "p{1..2}", "inputs_sha256": True}
    job, (pod,) = ft_job([node], result_contract=contract, data={"mnist": "datasets/mnist"})
    digest = "3f1c" + "e" * 60
    facts = {"inputs_fingerprint": "f" * 64, "inputs_sha256": digest, "inputs_files": 3,
             "inputs_bytes": 8}  # fmt: skip
    sent = [report(pod, state="exited", units=[unit("p1"), unit("p2")], facts=facts)]
    assert heartbeat(client, token, sent).status_code == 200
    api = client_for(researcher)
    result = api.get(f"/api/v1/jobs/{job.pk}/result").json()
    (attempt,) = result["run"]["attempts"]
    assert (attempt["inputs_sha256"], attempt["inputs_files"]) == (digest, 3)
    client.force_login(researcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'content sha256 <code title="{digest}">3f1ceeeeeeee…</code>' in page
    _print(result, [])
    assert f"content sha256 {digest[:12]}" in capsys.readouterr().out
    restarted = post(api, f"/api/v1/jobs/{job.pk}/restart", {"from_scratch": True})
    assert restarted.status_code == 201, restarted.content[:300]
    found = api.get(f"/api/v1/jobs/{restarted.json()['id']}/compare", {"with": job.pk}).json()
    change = next(c for c in found["changes"] if c["key"] == "resolved.inputs_sha256")
    assert (change["this_set"], change["other"]) == (False, digest)  # not started yet
