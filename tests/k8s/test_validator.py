"""The result's validator on Kubernetes (docs/results.md, "The validator"): once rank 0's
container ended with exit 0, the controller promotes the units and runs the validator as a
Pod of the job's image with the volume mounted read-only; the worker stays Running until
it ends; its exit code and last lines decide the result, as an agent's report does."""

from pathlib import Path

import pytest

from agents import sdk
from jobs.actions.results import record_runs
from jobs.models import Job, Pod, ResultUnit, RunRecord
from policy.statuses import JobStatus, PodStatus
from protocol import limits
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, api_pods, env_of, make_job, status

CONTRACT = {
    "unit": "partition",
    "expected_units": "p{1..2}",
    "validator": 'test "$(cat p*.csv | wc -l)" -eq 1000 && echo 1000 ids',
}


def _running_with_units(controller, kubelet, ns, kube_config, job, monkeypatch) -> str:
    """Rank 0 runs and accepts p1 and p2 on the shared volume; returns its Pod's name."""
    name = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, name), what="pod created")
    kubelet.start(ns, name)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    inside = env_of(api_pod(kubelet, ns, name))["OUTPUT_DIR"]
    here = Path(kube_config.checkpoint_root) / inside.removeprefix("/checkpoints/")
    monkeypatch.setenv("OUTPUT_DIR", str(here))
    for unit in ("p1", "p2"):
        (here / f"{unit}.csv").write_text("id\n" * 500)
        sdk.accept(unit, files=[here / f"{unit}.csv"], items=500)
    return name


def _validator_runs(controller, kubelet, ns, name, job) -> dict:
    vname = f"{name}-validator"
    settle(controller, lambda: api_pod(kubelet, ns, vname), what="validator pod created")
    # The units were promoted first; the exit is not applied while it runs.
    assert ResultUnit.objects.filter(job=job).count() == 2
    for _ in range(3):
        controller.step()
    assert status(job) == JobStatus.RUNNING
    assert Pod.objects.get(job=job).status == PodStatus.RUNNING
    return api_pod(kubelet, ns, vname)


def test_a_validator_that_passes_accepts_the_result_also_across_a_controller_restart(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch
):
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, result_contract=CONTRACT)
    record_runs([job])
    name = _running_with_units(controller, kubelet, ns, kube_config, job, monkeypatch)
    worker = api_pod(kubelet, ns, name)
    kubelet.exit(ns, name, 0)
    pod = _validator_runs(controller, kubelet, ns, name, job)

    # Its Pod: the job's image, the command in the result folder, the volume read-only, no
    # token, no GPUs, the deadline, on the worker's node, owned by the worker's Pod.
    result = f"/checkpoints/ws-{workspace.pk}/job-{job.pk}/output/result"
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["gpu-console.io/validates"] == name
    assert "gpu-console.io/pod-id" not in meta["labels"]
    assert [(o["kind"], o["name"], o["uid"]) for o in meta["ownerReferences"]] == [
        ("Pod", name, worker["metadata"]["uid"])
    ]
    assert spec["activeDeadlineSeconds"] == limits.RESULT_VALIDATOR_SECONDS
    assert spec["automountServiceAccountToken"] is False
    assert (spec["restartPolicy"], spec["nodeName"]) == ("Never", f"{ns}-a")
    (container,) = spec["containers"]
    assert (container["image"], container["workingDir"]) == ("busybox", result)
    assert container["command"] == ["/bin/sh", "-c", CONTRACT["validator"]]
    assert container["volumeMounts"] == [
        {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True}
    ]
    assert not (container.get("resources") or {}).get("limits")
    assert env_of(pod)["RESULT_DIR"] == result
    for volume_mount in api_pod(kubelet, ns, name)["spec"]["containers"][0]["volumeMounts"]:
        assert volume_mount["mountPath"] != "/checkpoints" or not volume_mount.get("readOnly")

    # A restarted controller finds it running and waits: never a second one.
    controller.stop()
    again = controllers()
    for _ in range(5):
        again.step()
    validators = [p for p in api_pods(kubelet, ns) if p["metadata"]["name"].endswith("-validator")]
    assert [p["metadata"]["uid"] for p in validators] == [meta["uid"]]
    assert status(job) == JobStatus.RUNNING

    kubelet.write(ns, meta["name"], "checking 2 files", "1000 ids")
    kubelet.exit(ns, meta["name"], 0, container="validator")
    settle(again, lambda: status(job) == JobStatus.COMPLETED, what="Completed")
    job = Job.objects.get(pk=job.pk)
    assert "result accepted (2/2 partitions, 1,000 items, validator ok)" in job.status_reason
    record = RunRecord.objects.get(job=job)
    assert (record.validator_exit_code, record.validator_output) == (
        0,
        "checking 2 files\n1000 ids",
    )
    settle(
        again,
        lambda: not api_pod(kubelet, ns, meta["name"]) and not api_pod(kubelet, ns, name),
        what="both pods gone",
    )


@pytest.mark.parametrize(
    ("ending", "reason", "exit_code"),
    [
        ("exit 3", "exited 0 but result rejected: validator exited 3: only 999 ids", 3),
        (
            "deadline",
            "exited 0 but result rejected: validator not run: timed out after "
            f"{limits.RESULT_VALIDATOR_SECONDS} s",
            None,
        ),
        (
            "deleted",
            "exited 0 but result rejected: validator not run: the validator's Pod disappeared",
            None,
        ),
    ],
)
def test_a_validator_that_fails_or_does_not_run_rejects_the_result(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch,
    ending, reason, exit_code,
):  # fmt: skip
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, ft=True, result_contract=CONTRACT)
    record_runs([job])
    name = _running_with_units(controller, kubelet, ns, kube_config, job, monkeypatch)
    kubelet.exit(ns, name, 0)
    vname = _validator_runs(controller, kubelet, ns, name, job)["metadata"]["name"]
    if ending == "exit 3":
        kubelet.write(ns, vname, "counting", "only 999 ids")
        kubelet.exit(ns, vname, 3, container="validator")
    elif ending == "deadline":
        kubelet.past_deadline(ns, vname)
    else:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        kubelet.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{vname}", body)
    settle(controller, lambda: status(job) == JobStatus.FAILED, what="Failed")
    job = Job.objects.get(pk=job.pk)
    assert job.status_reason == reason, job.status_reason
    assert job.restart_count == 0 and job.attempt == 1  # result_rejected: never retried
    record = RunRecord.objects.get(job=job)
    assert (record.result_code, record.validator_exit_code) == ("result_rejected", exit_code)
    settle(controller, lambda: not api_pod(kubelet, ns, vname), what="validator pod gone")
