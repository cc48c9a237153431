"""What the controller checks around counted results on Kubernetes (docs/results.md,
"Kubernetes"): a newly accepted unit is progress for the hang judge; the volume's free
space before a Pod; a resumed worker whose image changed is refused before any unit it
staged is promoted."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents import sdk
from jobs.actions.results import record_runs
from jobs.models import Job, Pod, ResultUnit
from policy.faulttolerance.policy import FtConfig
from policy.statuses import JobStatus
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, env_of, make_job, status

CONTRACT = {"unit": "partition", "expected_units": "p{1..3}"}
IMAGE_A = "docker.io/library/busybox@sha256:5d1f0c2e8a41" + "0" * 52
IMAGE_B = "docker.io/library/busybox@sha256:77aa9e1c0b3d" + "0" * 52


def _staging(kube_config, pod: dict) -> Path:
    inside = env_of(pod)["OUTPUT_DIR"]
    return Path(kube_config.checkpoint_root) / inside.removeprefix("/checkpoints/")


def _accept(monkeypatch, here: Path, unit: str) -> None:
    monkeypatch.setenv("OUTPUT_DIR", str(here))
    (here / f"{unit}.csv").write_text("id\n" * 10)
    sdk.accept(unit, files=[here / f"{unit}.csv"], items=10)


def test_a_newly_accepted_unit_moves_the_hang_deadline(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch
):
    """docs/fault-tolerance.md: the hang clock moves on progress; a unit the controller
    promotes is progress, as one an agent reports."""
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, ft=True, result_contract=CONTRACT)
    hangs = FtConfig(enabled=True, hang_detection=True, hang_timeout=3600)
    Job.objects.filter(pk=job.pk).update(ft_config=hangs.to_dict())
    record_runs([job])
    name = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, name), what="pod created")
    kubelet.start(ns, name)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    soon = timezone.now() + timedelta(seconds=60)  # as if quiet for 59 minutes
    Job.objects.filter(pk=job.pk).update(hang_deadline=soon)

    _accept(monkeypatch, _staging(kube_config, api_pod(kubelet, ns, name)), "p1")
    settle(controller, lambda: ResultUnit.objects.filter(job=job).exists(), what="unit counted")
    deadline = Job.objects.get(pk=job.pk).hang_deadline
    assert deadline > soon + timedelta(seconds=3000), deadline
    # Nothing new: the deadline stays where the unit put it.
    controller.step()
    assert Job.objects.get(pk=job.pk).hang_deadline == deadline


def test_a_volume_without_room_for_the_output_fails_the_job_once(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota
):
    """docs/results.md, "Before a long run": every node mounts the same volume, so the worker
    is refused before its Pod exists and the job fails saying why, its restart budget
    untouched and no other node tried (fault tolerance on)."""
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    kubelet.add_node(f"{ns}-b", 8, {"gpu-console-test": ns})
    controller = controllers()
    petabyte = {"expected_output_gb": 10**6}  # no test machine has it free
    job = make_job(researcher, workspace, quota, ft=True, result_contract=petabyte)
    settle(controller, lambda: status(job) == JobStatus.FAILED, what="Failed")
    job = Job.objects.get(pk=job.pk)
    staging = f"/checkpoints/ws-{workspace.pk}/job-{job.pk}/output/job-{job.pk}/attempt-1"
    assert job.status_reason.startswith(
        "worker 0 not started: refused to start: not enough free space for the output: "
    ), job.status_reason
    assert job.status_reason.endswith(
        f" free on {staging}, the job expects 1,000,000 GB; the checkpoint volume is shared "
        "by every node"
    ), job.status_reason
    assert (job.attempt, job.restart_count, job.excluded_nodes or []) == (1, 0, [])
    assert api_pod(kubelet, ns, f"job-{job.pk}-w0-a1") is None  # never created
    for _ in range(5):
        controller.step()
    assert not Pod.objects.filter(job=job, attempt=2).exists()


@pytest.mark.parametrize("image", [IMAGE_A, IMAGE_B], ids=["same", "changed"])
def test_a_resume_whose_image_changed_is_refused_before_its_units_are_promoted(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch,
    image,
):  # fmt: skip
    """docs/results.md, "Resume without duplicates": attempt 1 ran image A and accepted p1;
    attempt 2's kubelet reports its image. The same image goes on; another is refused at
    once: its Pod deleted, the worker ended `resume_refused` with the docker runtime's
    message, the job Failed, never retried, and the unit it staged stays staged."""
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, ft=True, result_contract=CONTRACT)
    record_runs([job])
    first = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, first), what="pod created")
    kubelet.start(ns, first, image_id=IMAGE_A)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    _accept(monkeypatch, _staging(kube_config, api_pod(kubelet, ns, first)), "p1")
    settle(controller, lambda: ResultUnit.objects.filter(job=job).exists(), what="unit counted")
    kubelet.exit(ns, first, 137)  # a failure fault tolerance retries

    second = f"job-{job.pk}-w0-a2"
    settle(controller, lambda: api_pod(kubelet, ns, second), what="attempt 2's pod")
    staged = _staging(kube_config, api_pod(kubelet, ns, second))
    _accept(monkeypatch, staged, "p2")  # staged by the new image as soon as it ran
    kubelet.start(ns, second, image_id=image)
    if image == IMAGE_A:
        settle(
            controller,
            lambda: (
                set(ResultUnit.objects.filter(job=job).values_list("unit", flat=True))
                == {"p1", "p2"}
            ),
            what="p2 counted",
        )
        assert status(job) == JobStatus.RUNNING
        return
    settle(
        controller,
        lambda: Pod.objects.filter(job=job, attempt=2, ended_by="resume_refused").exists(),
        what="attempt 2 refused",
    )
    refused = Pod.objects.get(job=job, attempt=2)
    assert refused.status_reason.startswith(
        "resume refused: the image 5d1f0c2e8a41 → 77aa9e1c0b3d changed since run "
    ), refused.status_reason
    settle(controller, lambda: status(job) == JobStatus.FAILED, what="Failed, not retried")
    settle(controller, lambda: api_pod(kubelet, ns, second) is None, what="its pod deleted")
    job = Job.objects.get(pk=job.pk)
    assert "worker 0 not started: resume refused: the image 5d1f0c2e8a41" in job.status_reason
    assert job.restart_count == 1 and not Pod.objects.filter(job=job, attempt=3).exists()
    assert list(ResultUnit.objects.filter(job=job).values_list("unit", flat=True)) == ["p1"]
    assert (staged / ".accepted" / "p2.json").exists()  # never promoted
    assert not (staged.parent.parent / "result" / "p2.csv").exists()
