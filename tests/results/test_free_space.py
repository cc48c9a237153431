"""Before a long run (docs/results.md): the agent refuses to start a worker whose output
folder lacks the free space its job expects (`result_expected_output_gb`). A node's
condition, not the job's failure: with Automatic Fault Tolerance the job is tried on another
node (this one excluded) without using its restart budget; without it, it fails saying why.

The pure rule, the agent's check, and the whole path: a submission through the API, the
scheduler, the real agent refusing, the console's decision."""

import pytest

from jobs.models import Job, RestartKind, RestartRecord
from policy.faulttolerance.policy import Action, Counters, Failure, FailureKind, FtConfig, decide
from policy.statuses import JobStatus
from protocol.freespace import free_space_problem
from tests.agents.agentproc import (
    agents,  # noqa: F401 - the fixture (F811 below: pytest injects it by name)
    registered,
    wait_for,
)
from tests.api.conftest import client_for, post

GB = 10**9
REFUSED = Failure(FailureKind.NODE_REFUSED, 0, None, "launch failed: refused: no space")


def test_the_decision():
    on = decide(FtConfig(enabled=True, max_restarts=0), Counters(failure_restarts=0), REFUSED)
    assert on.action == Action.RESTART_JOB
    assert on.exclude_node and not on.consumes_budget and on.backoff_seconds == 0
    assert on.reason == (
        "restart elsewhere: worker 0 not started: its node refused it "
        "(launch failed: refused: no space)"
    )
    off = decide(FtConfig(enabled=False), Counters(), REFUSED)
    assert (off.action, off.reason) == (
        Action.FAIL,
        "worker 0 not started: its node refused it (launch failed: refused: no space)",
    )


def test_the_agents_check(tmp_path):
    def disk(free):
        return lambda _path: (100 * GB, 100 * GB - free, free)

    assert free_space_problem(tmp_path, 5, usage=disk(6 * GB)) == ""
    assert free_space_problem(tmp_path, 5, usage=disk(4 * GB)) == (
        f"not enough free space for the output: 4.0 GB free on {tmp_path}, the job expects 5 GB"
    )
    assert free_space_problem(tmp_path, None, usage=disk(10**6)) == (
        f"not enough free space for the output: 1 MB free on {tmp_path}, the floor is 64 MB"
    )  # limits.OUTPUT_FREE_FLOOR_MB
    assert free_space_problem(tmp_path, None, usage=disk(10**9)) == ""

    def broken(_path):
        raise OSError("stale file handle")

    assert free_space_problem(tmp_path, 5, usage=broken) == ""  # cannot tell: start


def _submit(researcher, **extra) -> Job:
    body = {
        "quota": "team-a",
        "image": "busybox",
        "command": "echo should-not-run",
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "memory_gb_per_worker": 1,
        "result_expected_output_gb": 10**6,  # a petabyte: no test machine has it free
        **extra,
    }
    response = post(client_for(researcher), "/api/v1/jobs", body)
    assert response.status_code == 201, response.content[:400]
    assert response.json()["result"]["expected_output_gb"] == 10**6
    return Job.objects.get(pk=response.json()["id"])


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_without_fault_tolerance_the_job_fails_saying_why(
    agents,  # noqa: F811
    researcher,
    workspace,
    quota,
):
    agents("small-disk")
    registered("small-disk")
    job = _submit(researcher)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.FAILED, "the job to fail")
    job.refresh_from_db()
    assert job.status_reason.startswith(
        "worker 0 failed: launch failed: refused to start on this node: not enough free "
        "space for the output: "
    ), job.status_reason
    assert job.status_reason.endswith("the job expects 1,000,000 GB")
    pod = job.pods.get()
    assert pod.ended_by == "node_refused" and pod.started_at is None


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_with_fault_tolerance_it_is_tried_elsewhere_outside_the_budget(
    agents,  # noqa: F811
    researcher,
    workspace,
    quota,
):
    agents("small-disk")
    node = registered("small-disk")
    job = _submit(researcher, fault_tolerance=True, max_restarts=0)
    record = wait_for(lambda: RestartRecord.objects.filter(job=job).first(), "a restart")
    assert record.kind == RestartKind.NODE_REFUSED and not record.restarts_used
    job.refresh_from_db()
    assert job.restart_count == 0 and job.attempt == 2
    assert [e["name"] for e in job.excluded_nodes] == [node.name]
    # The only node is excluded: the job waits (bounded: it never goes back to that node).
    assert job.status in (JobStatus.PENDING, JobStatus.INQUEUE)
    assert job.pods.filter(attempt=2).count() == 0
