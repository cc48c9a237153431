"""Progress, checkpoints and log activity through the real agent endpoints, with fencing;
the SDK's checkpoints and the agent's scan of them."""

import json
import os
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from agents import sdk
from agents.node.progress import BadCheckpointDir, checkpoint_dir, read_progress, scan_checkpoints
from jobs.models import Checkpoint, Job, LogChunk, Pod, PodDesired
from policy.faulttolerance.policy import FtConfig
from policy.statuses import JobStatus, PodStatus
from tests.agents.conftest import heartbeat, post, register

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HANG = FtConfig(enabled=True, hang_detection=True, hang_timeout=600)


def report(pod, **extra) -> dict:
    return {"pod_id": pod.pk, "attempt": pod.attempt, "state": "running", **extra}


def ckpt(step: int, attempt: int | None = None) -> dict:
    body = {"step": step, "path": f"/ck/job/step-{step}", "size_bytes": 10, "checksum": "ab"}
    return body | ({"attempt": attempt} if attempt is not None else {})


def test_progress_moves_the_pod_and_the_hang_deadline(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], ft=HANG, hang_deadline=T0)
    with time_machine.travel(T0, tick=False):
        heartbeat(
            client, token, [report(pod, progress={"step": 5, "total": 100, "phase": "train"})]
        )
    with time_machine.travel(T0 + timedelta(seconds=10), tick=False):
        body = {"step": 25, "total": 100, "phase": "train", "metrics": {"loss": 0.5}}
        heartbeat(client, token, [report(pod, progress=body)])
    pod.refresh_from_db()
    assert (pod.progress_step, pod.progress_total, pod.progress_metrics) == (25, 100, {"loss": 0.5})
    assert pod.progress_rate == pytest.approx(2.0)
    assert Job.objects.get(pk=job.pk).hang_deadline == T0 + timedelta(seconds=610)
    # The same step again is not progress: the deadline stays.
    with time_machine.travel(T0 + timedelta(seconds=300), tick=False):
        heartbeat(client, token, [report(pod, progress=body)])
    assert Job.objects.get(pk=job.pk).hang_deadline == T0 + timedelta(seconds=610)


def test_many_workers_progress_costs_the_statements_of_two(client, ft_job):
    """A heartbeat's progress reports are stored together (jobs.actions.progress.
    store_progress_many): the same statements for six new steps as for two, every pod's
    step and rate right, one sample per new step, the job's hang deadline pushed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from jobs.models import ProgressSample

    node, token = register(client)
    job, pods = ft_job([node] * 6, ft=HANG, hang_deadline=T0)

    def beat(at: datetime, steps: dict) -> int:
        reports = [report(p, progress={"step": steps.get(p.pk, 1), "total": 50}) for p in pods]
        with time_machine.travel(at, tick=False), CaptureQueriesContext(connection) as queries:
            response = heartbeat(client, token, reports)
        assert response.status_code == 200, response.content
        assert response.json()["refused"] == {}
        return len(queries)

    beat(T0, {})
    two = beat(T0 + timedelta(seconds=10), {pods[0].pk: 11, pods[1].pk: 21})
    six = beat(T0 + timedelta(seconds=20), {p.pk: 41 for p in pods})
    assert six == two
    rates = {p.pk: r for p, r in zip(pods, [3.0, 2.0, 2.0, 2.0, 2.0, 2.0], strict=True)}
    for pod in Pod.objects.filter(job=job):
        assert pod.progress_step == 41
        assert pod.progress_rate == pytest.approx(rates[pod.pk])
    assert ProgressSample.objects.count() == 6 + 2 + 6
    assert Job.objects.get(pk=job.pk).hang_deadline == T0 + timedelta(seconds=620)


def test_checkpoints_of_the_current_attempt_are_recorded_once(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node])
    heartbeat(client, token, [report(pod, checkpoints=[ckpt(10, 1), ckpt(20)])])
    heartbeat(client, token, [report(pod, checkpoints=[ckpt(20), ckpt(30, 1)])])
    rows = list(Checkpoint.objects.filter(job=job).order_by("step"))
    assert [(c.step, c.attempt, c.committed) for c in rows] == [
        (10, 1, True),
        (20, 1, True),
        (30, 1, True),
    ]
    # A checkpoint another attempt saved into the shared folder is not this attempt's.
    heartbeat(client, token, [report(pod, checkpoints=[ckpt(40, attempt=2)])])
    assert not Checkpoint.objects.filter(step=40).exists()


def test_a_checkpoint_saved_on_sigterm_is_known_before_the_restart(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node])
    from jobs.actions.stop import request_stop
    from policy.statuses import Actor

    request_stop(job, actor=Actor.SCHEDULER, final_status=JobStatus.PREEMPTED, reason="reclaimed")
    exited = {"pod_id": pod.pk, "attempt": 1, "state": "exited", "exit_code": 143}
    heartbeat(client, token, [exited | {"checkpoints": [ckpt(17, 1)]}])
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.attempt == 2
    assert job.resume_from == "/ck/job/step-17"


def test_stale_workers_are_fenced(client, ft_job):
    """A node that comes back after its worker was declared lost and the job restarted: its
    worker is ordered stopped, its progress and checkpoints are ignored."""
    node, token = register(client)
    job, (pod,) = ft_job([node], ft=HANG, hang_deadline=T0)
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.LOST, status_reason="node lost")
    Job.objects.filter(pk=job.pk).update(attempt=2, status=JobStatus.PENDING)
    stale = report(pod, progress={"step": 99}, checkpoints=[ckpt(90, 1)])
    reply = heartbeat(client, token, [stale]).json()
    assert [order["pod_id"] for order in reply["stop"]] == [pod.pk]
    assert "already Lost" in reply["stop"][0]["reason"]
    assert Pod.objects.get(pk=pod.pk).progress_step is None
    assert not Checkpoint.objects.exists()
    # Its last log lines stay with the old attempt's worker (never the new attempt's) and
    # are no activity of the job: the hang deadline does not move.
    body = {"batches": [{"pod_id": pod.pk, "attempt": 1, "first_seq": 0, "lines": ["new"]}]}
    assert post(client, "logs/", body, token).status_code == 200
    assert list(LogChunk.objects.values_list("pod_id", "attempt")) == [(pod.pk, 1)]
    assert Job.objects.get(pk=job.pk).hang_deadline == T0


def test_workers_ordered_away_for_a_restart_are_not_heard(ft_job, node):
    from jobs.actions.progress import may_report

    job, (pod,) = ft_job([node])
    pod.job = job
    assert may_report(pod)
    pod.desired = PodDesired.STOP
    assert not may_report(pod)  # e.g. the rest of a gang stopped for a restart
    job.stop_requested_at = T0
    assert may_report(pod)  # the whole job is stopping: a save on SIGTERM still counts


def test_only_new_distinct_log_lines_move_the_deadline(client, ft_job):
    node, token = register(client)
    job, (pod,) = ft_job([node], ft=HANG, hang_deadline=T0)

    def send(seq, lines, at):
        body = {"batches": [{"pod_id": pod.pk, "attempt": 1, "first_seq": seq, "lines": lines}]}
        with time_machine.travel(at, tick=False):
            assert post(client, "logs/", body, token).status_code == 200
        return Job.objects.get(pk=job.pk).hang_deadline

    assert send(0, ["epoch 1", "WARN slow"], T0) == T0 + timedelta(seconds=600)
    assert send(2, ["WARN slow"] * 20, T0 + timedelta(seconds=100)) == T0 + timedelta(seconds=600)
    assert send(22, ["epoch 2"], T0 + timedelta(seconds=200)) == T0 + timedelta(seconds=800)


# --- SDK and agent scan ---------------------------------------------------------------------


def test_sdk_checkpoints_commit_with_a_manifest_and_prune(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTEMPT", "2")
    for step in (10, 20, 30, 40):
        sdk.checkpoint(step, {"step": step}, keep=3, root=tmp_path)
    assert [s for s, _ in sdk.committed(tmp_path)] == [20, 30, 40]
    # A save that crashed before its manifest does not count anywhere.
    (tmp_path / "step-50").mkdir()
    (tmp_path / "step-50" / "state.json").write_text("{")
    assert [s for s, _ in sdk.committed(tmp_path)] == [20, 30, 40]
    reports = scan_checkpoints(tmp_path)
    assert [(r.step, r.attempt) for r in reports] == [(40, 2), (30, 2), (20, 2)]
    assert sdk.load(tmp_path / "step-40") == (40, {"step": 40})
    manifest = json.loads((tmp_path / "step-40" / "manifest.json").read_text())
    assert (
        manifest["files"][0]["name"] == "state.json" and len(manifest["files"][0]["sha256"]) == 64
    )


def test_sdk_detects_a_corrupted_checkpoint_and_stores_bytes(tmp_path, monkeypatch):
    folder = sdk.checkpoint(7, b"\x00\x01weights", root=tmp_path)
    assert sdk.load(folder) == (7, b"\x00\x01weights")
    (folder / "state.bin").write_bytes(b"\x00\x01weightz")
    with pytest.raises(sdk.CheckpointError):
        sdk.load(folder)
    monkeypatch.setenv("RESUME_FROM", str(folder))
    with pytest.raises(sdk.CheckpointError):
        sdk.resume()


def test_a_truncated_file_is_not_reported_as_committed(tmp_path):
    folder = sdk.checkpoint(3, {"a": 1}, root=tmp_path)
    (folder / "state.json").write_text("")
    assert scan_checkpoints(tmp_path) == []


def test_sdk_progress_file_round_trip(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    monkeypatch.setenv("PROGRESS_FILE", str(path))
    sdk.progress(12, 100, phase="eval", loss=0.25, bad=float("nan"), text="x")
    got = read_progress(path)
    assert (got.step, got.total, got.phase, got.metrics) == (12, 100, "eval", {"loss": 0.25})
    path.write_text("not json")
    assert read_progress(path) is None
    monkeypatch.delenv("PROGRESS_FILE")
    sdk.progress(1)  # outside the console: a no-op


def test_checkpoint_folder_must_stay_under_the_root(tmp_path):
    assert checkpoint_dir(tmp_path, 7) == (tmp_path / "checkpoints" / "job-7").resolve()
    assert checkpoint_dir(tmp_path, 7, "team/run-1").name == "run-1"
    with pytest.raises(BadCheckpointDir):
        checkpoint_dir(tmp_path, 7, "../../etc")
    assert os.path.isdir(tmp_path)
