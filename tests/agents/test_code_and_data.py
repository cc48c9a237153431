"""A job's code and read-only data folders (docs/distributed.md): the agent checks the code
out at the commit its ref names; data is confined to the workspace's area like checkpoint
folders; the process runtime runs the worker in a mount namespace where it is read-only,
the docker runtime bind-mounts it read-only."""

import os
import subprocess
from pathlib import Path

import pytest

from agents.node.checkout import CheckoutFailed, checkout
from agents.node.ledger import data_folders
from agents.node.progress import BadCheckpointDir
from agents.node.runtimes.base import LaunchSpec
from agents.node.runtimes.container_config import (
    DockerOptions,
    UnsafeConfig,
    check_config,
    container_config,
)
from jobs.result_models import AttemptFacts
from policy.admission.values import Problem, data
from policy.statuses import PodStatus
from protocol.inputs import inputs_facts
from tests.agents.agentproc import pod_status, registered, stored_lines, wait_for
from tests.agents.conftest import make_job


def test_a_data_field_names_folders_of_the_workspace_area():
    assert data("mnist=datasets/mnist\nval=datasets/val/") == {
        "mnist": "datasets/mnist",
        "val": "datasets/val",
    }
    with pytest.raises(Problem, match="absolute path"):
        data({"mnist": "/etc"})
    with pytest.raises(Problem, match=r"no '\.\.'"):
        data({"mnist": "../other-workspace"})


def test_the_agent_finds_data_only_inside_the_workspace_area(tmp_path):
    area = tmp_path / "ws-1"
    (area / "datasets" / "mnist").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (area / "escape").symlink_to(tmp_path / "secret")
    found = data_folders(area, {"mnist": "datasets/mnist"})
    assert found == {"mnist": str((area / "datasets" / "mnist").resolve())}
    with pytest.raises(BadCheckpointDir, match="outside"):
        data_folders(area, {"x": "escape"})
    with pytest.raises(BadCheckpointDir, match="does not exist"):
        data_folders(area, {"x": "datasets/none"})


def _repository(path: Path) -> tuple[Path, str]:
    """A git repository with one commit on `main`; returns it and the commit."""
    path.mkdir()
    (path / "train.py").write_text("print('v1')\n")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "--quiet", "--initial-branch=main")
    git("add", "train.py")
    git("commit", "--quiet", "-m", "v1")
    return path, git("rev-parse", "HEAD")


def test_the_agent_checks_out_a_branch_at_its_commit_and_refuses_a_bad_ref(tmp_path):
    repo, commit = _repository(tmp_path / "repo")
    folder, found = checkout(tmp_path / "state", 1, 1, str(repo), "main")
    assert found == commit and (folder / "train.py").read_text() == "print('v1')\n"
    with pytest.raises(CheckoutFailed, match="git checkout"):
        checkout(tmp_path / "state", 2, 1, str(repo), "no-such-branch")
    with pytest.raises(CheckoutFailed, match="not a commit or branch"):
        checkout(tmp_path / "state", 3, 1, str(repo), "--upload-pack=x")


def _spec(**extra) -> LaunchSpec:
    return LaunchSpec(
        pod_id=1, job_id=2, attempt=1, rank=0, world_size=2, image="img", command="true", **extra
    )


def test_docker_mounts_data_read_only_and_joins_the_host_network_only_when_allowed(tmp_path):
    root = tmp_path / "checkpoints"
    folder = root / "ws-1" / "datasets" / "mnist"
    folder.mkdir(parents=True)
    spec = _spec(data={"mnist": str(folder)}, rendezvous={"NNODES": "2"})
    config = container_config(spec, DockerOptions(node="n1", gpus="off"), None)
    check_config(config, root)
    (mount,) = config["mounts"]
    assert (mount["Source"], mount["Target"], mount["ReadOnly"]) == (
        str(folder),
        "/data/mnist",
        True,
    )
    assert config["environment"]["DATA_MNIST"] == "/data/mnist"
    assert "network_mode" not in config  # the operator did not allow the host network

    opts = DockerOptions(node="n1", gpus="off", host_network=True)
    config = container_config(spec, opts, None)
    assert config["network_mode"] == "host"
    check_config(config, root, host_network=True)
    with pytest.raises(UnsafeConfig, match="network_mode"):
        check_config(config, root)
    writable = {**config, "mounts": [{**mount, "ReadOnly": False}]}
    with pytest.raises(UnsafeConfig, match="read-only data"):
        check_config(writable, root, host_network=True)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_worker_reads_its_code_and_data_and_cannot_write_the_data(
    agents, researcher, workspace, quota, tmp_path
):
    agents()
    node = registered("e2e-node")
    area = tmp_path / "e2e-node" / "checkpoints" / f"ws-{workspace.pk}"
    folder = area / "datasets" / "mnist"
    folder.mkdir(parents=True)
    (folder / "labels.txt").write_text("seven\n")
    repo, commit = _repository(tmp_path / "repo")
    command = (
        'cat "$CODE_DIR/train.py"; echo "commit=$CODE_COMMIT"; '
        'cat "$DATA_MNIST/labels.txt"; '
        'if echo x > "$DATA_MNIST/new.txt" 2>/dev/null; then echo "WROTE"; exit 1; fi; '
        'if rm "$DATA_MNIST/labels.txt" 2>/dev/null; then echo "REMOVED"; exit 1; fi; '
        'echo "read-only: ok"'
    )
    job, (pod,) = make_job(
        owner=researcher,
        workspace=workspace,
        quota=quota,
        nodes=[node],
        command=command,
        data={"mnist": "datasets/mnist"},
        code={"repo": str(repo), "ref": "main"},
    )
    wait_for(lambda: pod_status(pod) in (PodStatus.SUCCEEDED, PodStatus.FAILED), "the worker")
    lines = wait_for(lambda: (s := stored_lines(pod)) and "read-only: ok" in s and s, "its log")
    assert "seven" in lines and "WROTE" not in lines and "REMOVED" not in lines
    assert "print('v1')" in lines and f"commit={commit}" in lines
    assert any(f"checked out at commit {commit}" in line for line in lines)
    assert pod_status(pod) == PodStatus.SUCCEEDED
    assert sorted(os.listdir(folder)) == ["labels.txt"]
    assert Path(folder / "labels.txt").read_text() == "seven\n"
    # The commit checked out is the run's code version (docs/results.md, run identity).
    facts = wait_for(lambda: AttemptFacts.objects.filter(job=job).first(), "the run facts")
    assert facts.code_version == commit
    # …and the data folder's fingerprint, as found before the start, its inputs'.
    found, _ = inputs_facts({"mnist": str(folder)})
    assert (facts.inputs_fingerprint, facts.inputs_files, facts.inputs_bytes) == (
        found.inputs_fingerprint,
        1,
        len("seven\n"),
    )
