"""The data folders' content manifest on Kubernetes (docs/results.md, "Run identity" and
"Kubernetes"): before it creates the Pod of a worker whose job asks
(`result_inputs_sha256`), the controller hashes the job's data folders on its mount of the
volume in a thread of its own (kube.hashing), by the agent's rule (protocol.hashing); the
worker stays Starting with no Pod until the hash is done, while the step goes on with the
other workers; the manifest is kept beside the attempt's accepted file and its sha256 is
the identity's content digest, compared when the worker resumes."""

import hashlib
import os
import threading
from pathlib import Path

from agents import sdk
from jobs.actions.results import record_runs
from jobs.models import AttemptFacts, Pod, ResultUnit
from policy.statuses import JobStatus, PodStatus
from protocol.hashing import HashCache, hash_inputs
from protocol.inputs import inputs_facts
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, env_of, make_job, status

HASHED = {"inputs_sha256": True}
WAIT = 30.0
LABELS = b"3\n1\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dataset(kube_config, workspace, folder: str) -> Path:
    data = Path(kube_config.checkpoint_root) / f"ws-{workspace.pk}" / folder
    data.mkdir(parents=True)
    (data / "train.bin").write_bytes(b"x" * 1000)
    (data / "labels.txt").write_bytes(LABELS)
    return data


def _agents_digest(folders: dict[str, str], tmp_path: Path) -> str:
    """What a node's agent records for the same files (its rule: protocol.hashing)."""
    facts, _ = hash_inputs(
        folders, tmp_path / "agent" / "m.sha256", cache=HashCache(None), say=lambda _l: None,
        cancelled=threading.Event(),
    )  # fmt: skip
    return facts.inputs_sha256


def test_no_pod_until_hashed_and_the_identity_has_the_agents_digest(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, held_file_hash,
    tmp_path,
):  # fmt: skip
    ns = kube_ns
    entered, gate = held_file_hash
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    data = _dataset(kube_config, workspace, "datasets/mnist")
    controller = controllers()
    job = make_job(researcher, workspace, quota, data={"mnist": "datasets/mnist"},
                   result_contract=HASHED)  # fmt: skip
    name = f"job-{job.pk}-w0-a1"
    settle(controller, entered.is_set, what="its hash begun")
    for _ in range(5):  # held: the step goes on, the worker waits with no Pod
        settle(controller, lambda: True)
    assert api_pod(kubelet, ns, name) is None
    assert Pod.objects.get(job=job).status == PodStatus.STARTING
    assert not AttemptFacts.objects.filter(job=job).exists()

    gate.set()
    settle(controller, lambda: api_pod(kubelet, ns, name), what="pod created once hashed")
    facts = AttemptFacts.objects.get(job=job, attempt=1, rank=0)
    folders = {"mnist": str(data.resolve())}
    assert facts.inputs_sha256 == _agents_digest(folders, tmp_path)
    assert facts.inputs_fingerprint == inputs_facts(folders)[0].inputs_fingerprint
    assert (facts.inputs_files, facts.inputs_bytes) == (2, 1004)
    accepted = env_of(api_pod(kubelet, ns, name))["ACCEPTED_UNITS_FILE"]
    here = Path(kube_config.checkpoint_root) / accepted.removeprefix("/checkpoints/")
    manifest = here.with_name("attempt-1.inputs.sha256")
    text = manifest.read_bytes()
    assert hashlib.sha256(text).hexdigest() == facts.inputs_sha256
    assert text.decode().splitlines() == [
        f"{_sha(LABELS)}  mnist/labels.txt",
        f"{_sha(b'x' * 1000)}  mnist/train.bin",
    ]
    assert oct(Path(kube_config.hash_cache).stat().st_mode & 0o777) == "0o600"


def test_a_held_file_hash_does_not_hold_another_jobs_pod(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, held_file_hash
):
    ns = kube_ns
    entered, gate = held_file_hash
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    _dataset(kube_config, workspace, "big")
    controller = controllers()
    hashed = make_job(researcher, workspace, quota, data={"big": "big"}, result_contract=HASHED)
    settle(controller, entered.is_set, what="its hash begun")
    other = make_job(researcher, workspace, quota, name="other", data={"big": "big"})
    settle(controller, lambda: api_pod(kubelet, ns, f"job-{other.pk}-w0-a1"), what="other pod")
    assert api_pod(kubelet, ns, f"job-{hashed.pk}-w0-a1") is None
    assert entered.is_set() and not gate.is_set()  # still held
    gate.set()
    settle(controller, lambda: api_pod(kubelet, ns, f"job-{hashed.pk}-w0-a1"), what="its pod")


def test_a_restart_whose_content_changed_is_refused_before_its_pod(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch
):
    """docs/results.md, "Resume without duplicates": a byte changed with the file's size and
    times kept (the fingerprint is blind to it) is other content: the restart is refused
    before any Pod is made, never retried, and says what changed."""
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    data = _dataset(kube_config, workspace, "shards")
    controller = controllers()
    job = make_job(researcher, workspace, quota, ft=True, data={"shards": "shards"},
                   result_contract=HASHED)  # fmt: skip
    record_runs([job])
    first = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, first), what="pod created")
    kubelet.start(ns, first)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    inside = env_of(api_pod(kubelet, ns, first))["OUTPUT_DIR"]
    here = Path(kube_config.checkpoint_root) / inside.removeprefix("/checkpoints/")
    monkeypatch.setenv("OUTPUT_DIR", str(here))
    (here / "p1.csv").write_text("id\n")
    sdk.accept("p1", files=[here / "p1.csv"], items=1)
    settle(controller, lambda: ResultUnit.objects.filter(job=job).exists(), what="unit counted")

    path = data / "train.bin"
    st = path.stat()
    path.write_bytes(b"x" * 999 + b"y")  # the same size and modification time
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert inputs_facts({"shards": str(data)})[0].inputs_fingerprint == (
        AttemptFacts.objects.get(job=job, attempt=1).inputs_fingerprint
    )
    kubelet.exit(ns, first, 137)  # a failure fault tolerance retries
    settle(
        controller,
        lambda: Pod.objects.filter(job=job, attempt=2, ended_by="resume_refused").exists(),
        what="attempt 2 refused",
    )
    assert api_pod(kubelet, ns, f"job-{job.pk}-w0-a2") is None  # never created
    refused = Pod.objects.get(job=job, attempt=2)
    assert "resume refused: the data folders (content sha256)" in refused.status_reason, (
        refused.status_reason
    )
    settle(controller, lambda: status(job) == JobStatus.FAILED, what="Failed, not retried")
    assert not Pod.objects.filter(job=job, attempt=3).exists()
