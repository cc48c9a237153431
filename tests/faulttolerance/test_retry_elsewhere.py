"""Retry elsewhere: an ECC/Xid failure excludes the worker's node for the job, through the
real pod reconciler and scheduler cycle."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from api.jobs import job_detail
from api.serializers import job_json
from jobs.actions.workers import apply_worker_state
from jobs.models import Job, Pod, RestartRecord
from jobs.scheduler.cycle import load_snapshot, run_cycle
from policy.faulttolerance.policy import FtConfig, RunType
from policy.statuses import JobStatus, PodStatus
from tests.conftest import make_node

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ECC = "step 812\nRuntimeError: CUDA error: uncorrectable ECC error encountered"


def exit_with(pod: Pod, code: int, error: str) -> None:
    assert apply_worker_state(
        Pod.objects.get(pk=pod.pk), running=False, exit_code=code, error=error
    )


def run_new_attempt(job: Job) -> list[Pod]:
    run_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING, job.status_reason
    return list(Pod.objects.filter(job=job, attempt=job.attempt).select_related("node"))


@pytest.mark.parametrize("run_type", [RunType.SYNCHRONOUS, RunType.ASYNCHRONOUS])
def test_an_ecc_failure_restarts_the_job_away_from_its_node(ft_job, run_type):
    bad, good = make_node("n-a"), make_node("n-b")
    job, (pod,) = ft_job([bad], ft=FtConfig(enabled=True, run_type=run_type))
    exit_with(pod, 1, ECC)
    job.refresh_from_db()
    # Even Asynchronous restarts the whole job: a lone replacement would reuse the node.
    assert job.status == JobStatus.PENDING and job.attempt == 2
    assert job.excluded_nodes == [{"id": bad.pk, "name": "n-a", "rule": "ECC error"}]
    assert "node n-a excluded for this job" in job.status_reason
    record = RestartRecord.objects.get(job=job)
    assert (record.rule, record.node_name, record.whole_job) == ("ECC error", "n-a", True)
    snap = next(j for j in load_snapshot()[0].jobs if j.id == job.pk)
    assert snap.excluded_node_ids == frozenset({bad.pk})
    # The old worker has exited, so the new attempt is placed at once: on the other node,
    # although the failed one is the first in name order and entirely free.
    (new,) = run_new_attempt(job)
    assert new.node_id == good.pk
    assert "n-b" in job.status_reason
    # A second hardware failure there excludes that node too: nowhere left to go.
    apply_worker_state(new, running=True)
    with time_machine.travel(T0, tick=False):
        exit_with(new, 1, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus")
    job.refresh_from_db()
    assert job.restart_not_before == T0 + timedelta(seconds=10)  # second restart: backoff
    with time_machine.travel(T0 + timedelta(seconds=11), tick=False):
        run_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.INQUEUE and job.attempt == 3
    assert [e["name"] for e in job.excluded_nodes] == ["n-a", "n-b"]
    assert job.status_reason == (
        "no node this job may use has room (2 nodes excluded after an ECC/Xid failure: n-a, n-b)"
    )
    assert not Pod.objects.filter(job=job, attempt=3).exists()


def test_a_plain_failure_excludes_nothing(ft_job):
    job, (pod,) = ft_job([make_node("n-a")])
    exit_with(pod, 1, "RuntimeError: NCCL watchdog: collective operation timeout")
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.excluded_nodes == []
    (new,) = run_new_attempt(job)
    assert new.node.name == "n-a"


def test_an_asynchronous_plain_failure_still_restarts_one_worker_in_place(ft_job):
    a, b = make_node("n-a"), make_node("n-b")
    job, (p0, _) = ft_job([a, b], ft=FtConfig(enabled=True, run_type=RunType.ASYNCHRONOUS))
    exit_with(p0, 1, "RuntimeError: CUDA error: an illegal memory access was encountered")
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.excluded_nodes == []
    replacement = Pod.objects.get(job=job, attempt=2)
    assert (replacement.rank, replacement.node_id, replacement.status) == (
        0,
        a.pk,
        PodStatus.STARTING,
    )


def test_excluded_nodes_show_on_the_page_and_in_the_api(client, researcher, ft_job):
    bad, _ = make_node("n-a"), make_node("n-b")
    job, (pod,) = ft_job([bad])
    exit_with(pod, 1, ECC)
    client.force_login(researcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Excluded nodes" in page and "n-a (ECC error)" in page
    detail = job_detail(researcher, job.pk)
    body = job_json(detail, detail.pod_list)
    assert body["excluded_nodes"] == ["n-a"]
