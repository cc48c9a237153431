"""A declared output folder on the node (issue 32, item 2; docs/results.md): the run's
result folder is the folder the job declared, resolved in the workspace's area as the
checkpoint folder is; staging stays beside the checkpoint folder; units are promoted into
it by a rename, and a folder a rename cannot reach (another filesystem: EXDEV) or outside
the area refuses the launch; an agent restart adopts the worker with the same folders;
the Kubernetes controller promotes into it on the volume. Undeclared: the layout of
before (`output/result/` in the checkpoint folder)."""

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

from agents import sdk
from agents.node.ledger import Ledger
from agents.node.progress import BadCheckpointDir
from agents.node.runtimes.base import WorkerState
from agents.node.state import StateStore
from kube.config import KubeConfig
from kube.volumes import prepare_outputs, promote_units
from protocol import outputs
from protocol.agent import WorkerSpec

WS = 4


def _spec(output: str = "", attempt: int = 1) -> WorkerSpec:
    return WorkerSpec(
        pod_id=7, job_id=3, attempt=attempt, rank=0, world_size=1, image="i",
        command="python3 -c pass", workspace_id=WS, checkpoint_subdir="runs/a",
        output_subdir=output,
    )  # fmt: skip


def _launch(state: Path, monkeypatch, spec: WorkerSpec, ledger: Ledger | None = None):
    ledger = ledger or Ledger(StateStore(state))
    ledger.record_launch(spec.pod_id, spec.attempt)
    launch, _ = ledger.launch_spec(spec, state_dir=state, runtime="process", node="n")
    ledger.save()  # as the agent does after its launches (workers.json)
    monkeypatch.setenv("OUTPUT_DIR", launch.env["OUTPUT_DIR"])
    monkeypatch.setenv("ACCEPTED_UNITS_FILE", launch.env["ACCEPTED_UNITS_FILE"])
    return ledger, launch


def _accept(unit: str) -> None:
    path = sdk.output_dir() / f"{unit}.csv"
    path.write_text(unit)
    sdk.accept(unit, files=[path], items=1)


RUNNING = {7: WorkerState(pod_id=7, attempt=1, running=True)}


def test_units_are_promoted_into_the_declared_folder_and_staging_stays(tmp_path, monkeypatch):
    state = tmp_path / "state"
    ledger, launch = _launch(state, monkeypatch, _spec("results/exp"))
    area = (state / "checkpoints" / f"ws-{WS}").resolve()
    assert launch.env["OUTPUT_DIR"] == str(area / "runs/a/output/job-3/attempt-1")
    _accept("p1")
    (report,), _ = ledger.reports(RUNNING, [])
    assert [u.unit for u in report.units] == ["p1"]
    assert report.facts.result_dir == str(area / "results/exp")
    assert (area / "results/exp/p1.csv").read_text() == "p1"
    assert not (area / "runs/a/output/result").exists()  # nothing in the default place
    record = ledger.launched[7]
    assert record.result_dir == str(area / "results/exp")

    # After an agent restart the worker is adopted with the same folders: its units are
    # reported again from the declared folder, new ones promoted there.
    adopted = Ledger(StateStore(state))
    adopted.adopt(7, 1)
    _accept("p2")
    (again,), _ = adopted.reports(RUNNING, [])
    assert [u.unit for u in again.units] == ["p1", "p2"]
    assert again.facts.result_dir == str(area / "results/exp")
    assert (area / "results/exp/p2.csv").read_text() == "p2"

    # A new attempt (or a Restart in the same folders) is told what the folder holds.
    _, second = _launch(state, monkeypatch, _spec("results/exp", attempt=2), adopted)
    assert second.env["OUTPUT_DIR"].endswith("runs/a/output/job-3/attempt-2")
    assert sdk.accepted() == {"p1", "p2"}


def test_undeclared_keeps_the_result_in_the_checkpoint_folder(tmp_path, monkeypatch):
    state = tmp_path / "state"
    ledger, _ = _launch(state, monkeypatch, _spec())
    _accept("p1")
    (report,), _ = ledger.reports(RUNNING, [])
    area = (state / "checkpoints" / f"ws-{WS}").resolve()
    assert report.facts.result_dir == str(area / "runs/a/output/result")
    assert ledger.launched[7].result_dir == str(area / "runs/a/output/result")


def test_a_folder_leaving_the_workspaces_area_refuses_the_launch(tmp_path, monkeypatch):
    state = tmp_path / "state"
    area = state / "checkpoints" / f"ws-{WS}"
    area.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (area / "escape").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BadCheckpointDir, match="output folder 'escape/x' is outside"):
        _launch(state, monkeypatch, _spec("escape/x"))
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_folder_a_rename_cannot_reach_refuses_the_launch(tmp_path, monkeypatch):
    """EXDEV: a copy across filesystems would not be atomic, so no unit could ever be
    promoted: the launch fails with the reason instead of a run whose result is lost."""
    real = os.rename

    def across(source, target):
        if Path(target).parent.name == "exp":
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(source, target)

    monkeypatch.setattr(outputs.os, "rename", across)
    with pytest.raises(BadCheckpointDir, match="on another filesystem than the staging folder"):
        _launch(tmp_path / "state", monkeypatch, _spec("results/exp"))
    staging = next((tmp_path / "state").rglob("attempt-1"))
    assert list(staging.iterdir()) == []  # the probe is gone


@contextlib.contextmanager
def _tmpfs(folder: Path):
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "none", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_real_mount_inside_the_area_is_refused(tmp_path, monkeypatch):
    state = tmp_path / "state"
    mount = state / "checkpoints" / f"ws-{WS}" / "results"
    with _tmpfs(mount), pytest.raises(BadCheckpointDir, match="cannot cross filesystems"):
        _launch(state, monkeypatch, _spec("results/exp"))


def test_the_kubernetes_controller_promotes_into_the_declared_folder(tmp_path, monkeypatch):
    root = tmp_path / "volume"
    root.mkdir()
    config = KubeConfig(api_url="https://k", token="t", namespace="ns", checkpoint_root=str(root))
    where = (config, WS, 3, "runs/a")
    result = prepare_outputs(*where, 1, "results/exp")
    area = root.resolve() / f"ws-{WS}"
    assert result == str(area / "results/exp")
    staging = area / "runs/a/output/job-3/attempt-1"
    monkeypatch.setenv("OUTPUT_DIR", str(staging))
    monkeypatch.delenv("ACCEPTED_UNITS_FILE", raising=False)
    _accept("p1")
    units, reported = promote_units(*where, 1, "results/exp")
    assert ([u.unit for u in units], reported) == (["p1"], result)
    assert (area / "results/exp/p1.csv").read_text() == "p1"
    assert prepare_outputs(*where, 2) == str(area / "runs/a/output/result")  # undeclared
