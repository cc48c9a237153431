"""A declared output folder on Kubernetes (issue 32, item 2; docs/results.md): the workers
stage beside the checkpoint folder on the shared volume as before, and the controller
promotes their accepted units into the folder the job declared (`kube.volumes`), records
it as the run's result folder, and judges the exit with them."""

from pathlib import Path

from agents import sdk
from jobs.actions.results import record_runs
from jobs.models import AttemptFacts, Job, ResultUnit
from policy.statuses import JobStatus
from tests.k8s.conftest import settle
from tests.k8s.helpers import api_pod, env_of, make_job, status

CONTRACT = {"unit": "partition", "expected_units": "p{1..2}", "output_dir": "results/k8s"}


def test_units_are_promoted_into_the_declared_folder_on_the_volume(
    controllers, kubelet, kube_ns, kube_config, researcher, workspace, quota, monkeypatch
):
    ns = kube_ns
    kubelet.add_node(f"{ns}-a", 8, {"gpu-console-test": ns})
    controller = controllers()
    job = make_job(researcher, workspace, quota, result_contract=CONTRACT)
    record_runs([job])
    name = f"job-{job.pk}-w0-a1"
    settle(controller, lambda: api_pod(kubelet, ns, name), what="pod created")
    inside = f"/checkpoints/ws-{workspace.pk}/job-{job.pk}/output/job-{job.pk}/attempt-1"
    assert env_of(api_pod(kubelet, ns, name))["OUTPUT_DIR"] == inside  # staging: unchanged
    root = Path(kube_config.checkpoint_root).resolve()
    here = root / inside.removeprefix("/checkpoints/")
    declared = root / f"ws-{workspace.pk}" / "results" / "k8s"
    assert declared.is_dir()

    kubelet.start(ns, name)
    settle(controller, lambda: status(job) == JobStatus.RUNNING, what="Running")
    monkeypatch.setenv("OUTPUT_DIR", str(here))  # the program, through the shared volume
    monkeypatch.delenv("ACCEPTED_UNITS_FILE", raising=False)
    for unit in ("p1", "p2"):
        part = here / f"{unit}.csv"
        part.write_text("id\n" * 10)
        sdk.accept(unit, files=[part], items=10)
    settle(
        controller,
        lambda: ResultUnit.objects.filter(job=job).count() == 2,
        what="units counted while it runs",
    )
    kubelet.exit(ns, name, 0)
    settle(controller, lambda: status(job) == JobStatus.COMPLETED, what="Completed")
    assert "result accepted (2/2 partitions" in Job.objects.get(pk=job.pk).status_reason
    assert sorted(p.name for p in declared.glob("*.csv")) == ["p1.csv", "p2.csv"]
    assert not (here.parent.parent / "result").exists()
    facts = AttemptFacts.objects.get(job=job, attempt=1, rank=0)
    assert facts.result_dir == str(declared)
