"""Checkpoints the SDK pruned from disk: the agent's scan no longer reports them, so the console
marks them pruned (the row stays), shows them greyed, and never resumes from them."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
import time_machine

from agents import sdk
from agents.node.progress import scan_checkpoints
from jobs.actions.progress import pruned_gone
from jobs.actions.workers import apply_worker_state
from jobs.models import Checkpoint, Job, Pod
from policy.statuses import JobStatus
from protocol import limits
from tests.agents.conftest import heartbeat, register

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def scanned(folder) -> list[dict]:
    """What the agent's heartbeat carries for a worker: its scan, as JSON."""
    return [r.model_dump() for r in scan_checkpoints(folder)]


def report(pod: Pod, checkpoints: list[dict]) -> dict:
    return {
        "pod_id": pod.pk,
        "attempt": pod.attempt,
        "state": "running",
        "checkpoints": checkpoints,
    }


def states(job: Job) -> list[tuple[int, bool]]:
    rows = Checkpoint.objects.filter(job=job).order_by("step")
    return [(c.step, c.pruned_at is not None) for c in rows]


def test_checkpoints_the_sdk_pruned_are_marked_not_deleted(client, ft_job, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTEMPT", "1")
    node, token = register(client)
    job, (pod,) = ft_job([node])
    for step in (10, 20, 30):
        sdk.checkpoint(step, {"step": step}, keep=3, root=tmp_path)
    heartbeat(client, token, [report(pod, scanned(tmp_path))])
    assert states(job) == [(10, False), (20, False), (30, False)]
    for step in (40, 50):  # the SDK keeps 3: step-10 and step-20 are deleted from disk
        sdk.checkpoint(step, {"step": step}, keep=3, root=tmp_path)
    with time_machine.travel(T0, tick=False):
        heartbeat(client, token, [report(pod, scanned(tmp_path))])
    assert states(job) == [(10, True), (20, True), (30, False), (40, False), (50, False)]
    assert Checkpoint.objects.get(job=job, step=10).pruned_at == T0
    # The same scan again changes nothing (the first pruning time stays).
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        heartbeat(client, token, [report(pod, scanned(tmp_path))])
    assert Checkpoint.objects.get(job=job, step=10).pruned_at == T0


def test_a_new_attempt_never_resumes_from_a_pruned_checkpoint(client, ft_job):
    node, _ = register(client)
    job, (pod,) = ft_job([node])
    for step in (10, 20):
        Checkpoint.objects.create(
            job=job, attempt=1, step=step, path=f"/ck/step-{step}", committed=True
        )
    # A pruned row newer than every live one (e.g. recorded from a worker on another node).
    Checkpoint.objects.create(
        job=job, attempt=1, step=30, path="/ck/step-30", committed=True, pruned_at=T0
    )
    assert apply_worker_state(
        Pod.objects.get(pk=pod.pk), running=False, exit_code=1, error="NCCL timeout"
    )
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.resume_from == "/ck/step-20"


def test_an_empty_scan_prunes_nothing(client, ft_job):
    # A worker that saves no checkpoints (rank 1 on another node) reports none at all.
    node, token = register(client)
    job, (pod,) = ft_job([node])
    Checkpoint.objects.create(job=job, attempt=1, step=10, path="/ck/step-10", committed=True)
    heartbeat(client, token, [report(pod, [])])
    assert states(job) == [(10, False)]


def test_a_fenced_worker_prunes_nothing(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node])
    Checkpoint.objects.create(job=job, attempt=1, step=10, path="/ck/step-10", committed=True)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PENDING, attempt=2)
    heartbeat(client, token, [report(pod, [{"step": 20, "path": "/ck/step-20"}])])
    assert states(job) == [(10, False)]


def test_a_checkpoint_saved_again_at_a_pruned_path_is_present_again(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node])
    Checkpoint.objects.create(
        job=job, attempt=1, step=10, path="/ck/step-10", committed=True, pruned_at=T0
    )
    again = {"step": 10, "path": "/ck/step-10", "size_bytes": 7, "checksum": "cd", "attempt": 1}
    heartbeat(client, token, [report(pod, [again])])
    row = Checkpoint.objects.get(job=job)
    assert (row.pruned_at, row.size_bytes, row.checksum) == (None, 7, "cd")


def test_neither_the_page_nor_the_api_lists_pruned_checkpoints(
    client, researcher, ft_job, api_token
):
    node, _ = register(client)
    job, _ = ft_job([node])
    Checkpoint.objects.create(job=job, attempt=1, step=10, path="/ck/step-10", committed=True)
    Checkpoint.objects.create(
        job=job, attempt=1, step=5, path="/ck/step-5", committed=True, pruned_at=T0
    )
    client.force_login(researcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    # The page lists the live ones and counts the pruned (a long job has hundreds); the API
    # never lists one whose files are gone either (issue 34), unless asked for them.
    assert "1 older checkpoint pruned" in page and "/ck/step-5" not in page
    assert "/ck/step-10" in page
    auth = {"Authorization": f"Bearer {api_token}"}
    body = client.get(f"/api/v1/jobs/{job.pk}/", headers=auth).json()
    assert [(c["step"], c["pruned_at"]) for c in body["checkpoints"]] == [(10, None)]
    listed = client.get(f"/api/v1/jobs/{job.pk}/checkpoints", headers=auth).json()
    assert [c["step"] for c in listed["checkpoints"]] == [10]
    url = f"/api/v1/jobs/{job.pk}/checkpoints?include_pruned=true"
    every = client.get(url, headers=auth).json()["checkpoints"]
    by_step = {c["step"]: c["pruned_at"] for c in every}
    assert by_step[10] is None and by_step[5] is not None


# -- the pure rule ----------------------------------------------------------------------------
def ck(step: int) -> SimpleNamespace:
    return SimpleNamespace(step=step, path=f"/ck/step-{step}")


LIVE = [(step, f"/ck/step-{step}", step) for step in (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)]


@pytest.mark.parametrize(
    ("reported", "gone"),
    [
        ([], []),  # nothing reported: nothing known
        ([ck(100), ck(90), ck(80)], [10, 20, 30, 40, 50, 60, 70]),  # a complete short list
        ([ck(100), ck(60)], [10, 20, 30, 40, 50, 70, 80, 90]),  # gaps inside the range too
        # Rows newer than the newest reported one were saved elsewhere: not proof of pruning.
        ([ck(50)], [10, 20, 30, 40]),
    ],
)
def test_pruned_gone_with_a_complete_list(reported, gone):
    assert pruned_gone(reported, LIVE) == gone


def test_a_truncated_list_only_speaks_for_the_steps_it_covers():
    # The agent reports at most limits.CHECKPOINTS_REPORTED, newest first: a full list says
    # nothing of steps older than its oldest entry.
    steps = [100 - 3 * i for i in range(limits.CHECKPOINTS_REPORTED)]  # 100, 97, … 79
    reported = [ck(s) for s in steps]
    assert pruned_gone(reported, LIVE) == [80, 90]
    # One fewer and the list is complete: everything older is gone as well.
    assert pruned_gone(reported[:-1], LIVE) == [10, 20, 30, 40, 50, 60, 70, 80, 90]
