"""Counted results on Kubernetes (docs/results.md, "Kubernetes"): each worker gets
OUTPUT_DIR and ACCEPTED_UNITS_FILE on the shared checkpoint volume; the controller verifies
and promotes the accepted units there on each step (protocol.outputs.promote, the agent's
rule) before it applies an exit, so an exit 0 is judged with every unit."""

import json
from pathlib import Path

import pytest

from agents import sdk
from jobs.actions.results import record_runs
from jobs.models import Job, ResultUnit
from policy.statuses import JobStatus
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
