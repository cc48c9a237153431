"""Counted results on Kubernetes (docs/results.md, "Kubernetes"): each worker gets
OUTPUT_DIR and ACCEPTED_UNITS_FILE on the shared checkpoint volume; the controller verifies
and promotes the accepted units there on each step (protocol.outputs.promote, the agent's
rule) before it applies an exit, so an exit 0 is judged with every unit."""

import json
from pathlib import Path

import pytest

from agents import sdk
from jobs.actions.results import record_runs
from jobs.models import AttemptFacts, Job, Pod, ResultUnit
from kube.actions import note_image
from policy.statuses import JobStatus
from protocol import preflight
from protocol.inputs import inputs_facts
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, env_of, make_job, status

CONTRACT = {"unit": "partition", "expected_units": "p{1..3}"}


@pytest.mark.parametrize(
    ("accepted", "final", "reason"),
    [
        (("p1", "p2", "p3"), JobStatus.COMPLETED, "result accepted (3/3 partitions"),
        (("p1", "p2"), JobStatus.FAILED, "exited 0 but result rejected: partitions p3"),
    ],
    ids=["whole", "short"],
)
def test_units_accepted_on_the_volume_decide_the_exit(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch,
    accepted, final, reason,
):  # fmt: skip
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, result_contract=CONTRACT)
    record_runs([job])
    name = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, name), what="pod created")
    env = env_of(api_pod(kubelet, ns, name))
    inside = f"/checkpoints/ws-{workspace.pk}/job-{job.pk}/output/job-{job.pk}/attempt-1"
    assert env["OUTPUT_DIR"] == inside
    assert env["ACCEPTED_UNITS_FILE"] == f"{inside}.accepted.json"
    here = Path(kube_config.checkpoint_root) / inside.removeprefix("/checkpoints/")
    assert json.loads(Path(f"{here}.accepted.json").read_text()) == {"units": {}}

    kubelet.start(ns, name)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    monkeypatch.setenv("OUTPUT_DIR", str(here))  # the program, through the shared volume
    for unit in accepted:
        part = here / f"{unit}.csv"
        part.write_text("id\n" * 500)
        sdk.accept(unit, files=[part], items=500)
    settle(
        controller,
        lambda: ResultUnit.objects.filter(job=job).count() == len(accepted),
        what="units counted while it runs",
    )
    kubelet.exit(ns, name, 0)
    settle(controller, lambda: status(job) == final, what=str(final))
    job = Job.objects.get(pk=job.pk)
    assert reason in job.status_reason, job.status_reason
    result = here.parent.parent / "result"
    assert sorted(p.name for p in result.glob("*.csv")) == [f"{u}.csv" for u in accepted]


def test_a_run_from_nothing_rehearses_first_a_resumed_one_does_not(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota
):
    """The preflight on Kubernetes (docs/results.md, "Before a long run"): the Pod the
    controller creates runs the rehearsal script with the job's command in RUN_COMMAND."""
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    rehearsal = {"preflight_seconds": 30}
    fresh = make_job(researcher, workspace, quota, result_contract=rehearsal)
    resumed = make_job(
        researcher, workspace, quota, name="again", result_contract=rehearsal,
        resume_from=f"/checkpoints/ws-{workspace.pk}/job-1/step-5",
    )  # fmt: skip
    pods = {job.pk: f"job-{job.pk}-w0-a1" for job in (fresh, resumed)}
    settle(
        controller,
        lambda: all(api_pod(kubelet, ns, name) for name in pods.values()),
        what="pods created",
    )
    rehearsing = api_pod(kubelet, ns, pods[fresh.pk])["spec"]["containers"][0]
    assert rehearsing["command"] == ["/bin/sh", "-c", preflight.wrapped(30)]
    assert env_of(api_pod(kubelet, ns, pods[fresh.pk]))[preflight.COMMAND_ENV] == (
        "python train.py"
    )
    plain = api_pod(kubelet, ns, pods[resumed.pk])
    assert plain["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", "python train.py"]
    assert preflight.COMMAND_ENV not in env_of(plain)


def test_the_run_identity_has_the_data_fingerprint_and_the_image_the_kubelet_ran(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota
):
    """docs/results.md, "Run identity": before the Pod the controller fingerprints the
    job's data folders on the shared volume (the agent's rule, protocol.inputs) and records
    the result folder; once it runs, the image's id from the pod status."""
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    data = Path(kube_config.checkpoint_root) / f"ws-{workspace.pk}" / "datasets" / "mnist"
    data.mkdir(parents=True)
    (data / "train.bin").write_bytes(b"x" * 1000)
    (data / "labels.txt").write_text("3\n1\n")
    controller = controllers()
    job = make_job(researcher, workspace, quota, data={"mnist": "datasets/mnist"})
    name = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, name), what="pod created")
    facts = AttemptFacts.objects.get(job=job, attempt=1, rank=0)
    assert facts.inputs_fingerprint == inputs_facts({"mnist": str(data)})[0].inputs_fingerprint
    assert (facts.inputs_files, facts.inputs_bytes) == (2, 1004)
    assert facts.result_dir.endswith(f"/ws-{workspace.pk}/job-{job.pk}/output/result")
    assert facts.image_digest == ""

    image_id = "docker.io/library/busybox@sha256:" + "ab" * 32
    kubelet.start(ns, name, image_id=image_id)
    settle(
        controller,
        lambda: AttemptFacts.objects.get(pk=facts.pk).image_digest == image_id,
        what="the image's id recorded",
    )
    # Recorded once, never changed (a second report, as after a controller restart).
    assert not note_image(Pod.objects.get(job=job), "docker.io/library/busybox@sha256:" + "cd" * 32)
    assert AttemptFacts.objects.get(pk=facts.pk).image_digest == image_id


def test_a_restart_whose_data_changed_is_refused_before_its_pod(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch
):
    """docs/results.md, "Resume without duplicates", on Kubernetes: attempt 1 accepted a
    unit; its data folder then changed; the restart is refused before any Pod is made
    (ended_by resume_refused, never retried) and says what changed."""
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    data = Path(kube_config.checkpoint_root) / f"ws-{workspace.pk}" / "shards"
    data.mkdir(parents=True)
    (data / "s1.bin").write_bytes(b"1" * 100)
    controller = controllers()
    job = make_job(researcher, workspace, quota, ft=True, data={"shards": "shards"})
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

    (data / "s2.bin").write_bytes(b"2" * 100)  # the inputs change under the run
    kubelet.exit(ns, first, 137)  # killed (out of memory): a failure fault tolerance retries
    settle(
        controller,
        lambda: Pod.objects.filter(job=job, attempt=2, ended_by="resume_refused").exists(),
        what="attempt 2 refused",
    )
    assert api_pod(kubelet, ns, f"job-{job.pk}-w0-a2") is None  # never created
    refused = Pod.objects.get(job=job, attempt=2)
    assert "resume refused: the data folders" in refused.status_reason, refused.status_reason
    settle(controller, lambda: status(job) == JobStatus.FAILED, what="Failed, not retried")
    assert not Pod.objects.filter(job=job, attempt=3).exists()
