"""A resume whose code changed is refused (docs/results.md, "Resume without duplicates"):
the console tells a Starting worker of a job that carries accepted units which run those
units came from and what its runtime resolved (`WorkerSpec.resume_identity`); the agent
compares what it resolved itself (the commit it checked out, the program's sha256) before
the start and refuses a changed one (`ended_by: resume_refused`); the job fails saying
so, never retried, and "Restart from scratch" is the way on.

Without the rule a Restart after a code change mixed units of two programs in one result."""

import subprocess
from datetime import UTC, datetime

import pytest

from jobs.actions.results import record_runs
from jobs.actions.submit import resubmit_job
from jobs.models import AttemptFacts, Job, ResultUnit, RunRecord
from policy.faulttolerance.policy import Action, Counters, Failure, FailureKind, FtConfig, decide
from policy.statuses import JobStatus, PodStatus
from protocol.units import ResumeIdentity, RunFacts, resume_refusal
from tests.agents.agentproc import (
    agents,  # noqa: F401 - the fixture (F811 below: pytest injects it by name)
    registered,
    wait_for,
)
from tests.agents.conftest import make_job

A, B = "a" * 40, "b" * 40
SHA = "c" * 64


def test_the_rule():
    expected = ResumeIdentity(run_id="train-7", carried=5, units="partitions", code_version=A)
    assert resume_refusal(None, RunFacts(code_version=B)) == ""
    assert resume_refusal(expected, RunFacts(code_version=A)) == ""
    assert resume_refusal(expected, RunFacts()) == ""  # not resolved this time: not compared
    assert resume_refusal(expected, RunFacts(code_version=B, executable_sha256=SHA)) == (
        "resume refused: the code version aaaaaaaaaaaa → bbbbbbbbbbbb changed since run "
        "train-7; its 5 accepted partitions were made by the old one. Restart from scratch "
        "(a new job in a folder of its own, nothing carried), or restore it."
    )
    refused = Failure(FailureKind.RESUME_REFUSED, 0, None, "launch failed: resume refused: x")
    decision = decide(FtConfig(enabled=True), Counters(), refused)
    assert (decision.action, decision.reason) == (
        Action.FAIL,
        "worker 0 not started: resume refused: x",
    )


def _git(path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    done = subprocess.run(command, cwd=path, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _commit(repo, text: str) -> str:
    (repo / "train.py").write_text(text)
    _git(repo, "add", "train.py")
    _git(repo, "commit", "--quiet", "-m", text)
    return _git(repo, "rev-parse", "HEAD")


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_restart_after_a_code_change_is_refused_by_the_agent(
    agents,  # noqa: F811
    researcher,
    workspace,
    quota,
    tmp_path,
):
    agents("n-code")
    node = registered("n-code")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "--quiet", "--initial-branch=main")
    first = _commit(repo, "print('v1')\n")
    # What the original run resolved and accepted before it failed.
    original = failed_run(
        researcher, workspace, quota, node, {"code_version": first},
        code={"repo": str(repo), "ref": "main"},
    )  # fmt: skip
    second = _commit(repo, "print('v2')\n")  # the branch moved on

    failed, run = refused_restart(original, researcher)  # placed at once on n-code
    assert failed.status_reason.startswith(
        f"worker 0 not started: resume refused: the code version {first[:12]} → "
        f"{second[:12]} changed since run {run}; its 2 accepted partitions were made by the "
        "old one. Restart from scratch (a new job in a folder of its own, nothing carried), "
        "or restore it."
    )


def failed_run(researcher, workspace, quota, node, resolved: dict, **fields) -> Job:
    """A fault-tolerant run that failed after its first attempt resolved `resolved` (the
    AttemptFacts fields) and accepted 2 of its 4 partitions."""
    original, _ = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        status=JobStatus.FAILED,
        pod_status=PodStatus.FAILED,
        command="echo should-not-run",
        result_contract={"unit": "partition", "expected_units": "p{1..4}"},
        fault_tolerance=True,
        ft_config={"max_restarts": 3},
        cpus_per_worker=1,  # fits the agent's fake node (this machine's CPUs)
        memory_gb_per_worker=1,
        **fields,
    )
    record_runs([original])
    AttemptFacts.objects.create(job=original, attempt=1, rank=0, image="i", **resolved)
    now = datetime.now(UTC)
    for unit in ("p1", "p2"):
        ResultUnit.objects.create(job=original, unit=unit, digest=SHA, attempt=1, accepted_at=now)
    return original


def refused_restart(original: Job, user) -> tuple[Job, str]:
    """Restart `original` (it carries its 2 units) and wait for the agent's refusal: the
    new job failed, never retried, its worker never started; and the original's run id."""
    clone = resubmit_job(original, user=user)
    assert ResultUnit.objects.filter(job=clone).count() == 2
    failed = wait_for(
        lambda: Job.objects.filter(pk=clone.pk, status=JobStatus.FAILED).first(), "the refusal"
    )
    assert failed.restart_count == 0 and failed.attempt == 1  # never retried
    (worker,) = failed.pods.all()
    assert worker.ended_by == "resume_refused" and worker.started_at is None
    return failed, RunRecord.objects.get(job=original).run_id
