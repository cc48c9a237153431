"""Checkpoints belong to their workspace (issue 9, third bullet).

Each workspace has its own area of the node's checkpoint root; a job's folder (default
`job-<id>`, or the one it names) resolves inside its workspace's area only, a worker
resumes only from inside it, and the docker runtime mounts only that folder. A restart of
a job keeps the original's folder, so it can resume from it.

The old code: `checkpoint_dir` was a free path under the node-wide root, so a *speech* job
read and overwrote what a *vision* job wrote in `shared/ckpt`, and could name `job-<id>` of
the other team's job.
"""

import pytest
import requests

from accounts.actions import issue_api_token
from agents.node.progress import (
    BadCheckpointDir,
    checkpoint_dir,
    resolve_resume,
    workspace_area,
)
from agents.node.runtimes.base import CHECKPOINT_ENV, LaunchSpec
from agents.node.runtimes.container_config import (
    DockerOptions,
    UnsafeConfig,
    check_config,
    checkpoint_folder,
    container_config,
)
from jobs.models import Job, Pod
from policy.statuses import PodStatus
from tests.agents.agentproc import registered, stored_lines, wait_for
from tests.conftest import make_user

FINAL = {"Completed", "Failed", "Stopped"}


# --- the agent's rules (no console needed) ---------------------------------------------------


def test_the_same_folder_name_is_a_different_folder_in_each_workspace(tmp_path):
    vision = checkpoint_dir(tmp_path, 1, "shared/ckpt", workspace_id=1)
    speech = checkpoint_dir(tmp_path, 2, "shared/ckpt", workspace_id=2)
    assert vision != speech
    assert vision.is_relative_to(workspace_area(tmp_path, 1).resolve())
    assert speech.is_relative_to(workspace_area(tmp_path, 2).resolve())
    # Another team's default folder, named: it is a folder of one's own area.
    assert checkpoint_dir(tmp_path, 2, "job-1", workspace_id=2) != checkpoint_dir(
        tmp_path, 1, "", workspace_id=1
    )


def test_nothing_outside_the_area_can_be_named_even_through_a_symlink(tmp_path):
    vision = checkpoint_dir(tmp_path, 1, "", workspace_id=1)
    speech_area = workspace_area(tmp_path, 2)
    speech_area.mkdir(parents=True, exist_ok=True)
    (speech_area / "door").symlink_to(vision)  # planted by a speech job (process runtime)
    for subdir in ("door", "door/x", "../ws-1/job-1"):
        with pytest.raises(BadCheckpointDir, match="outside this workspace's area"):
            checkpoint_dir(tmp_path, 2, subdir, workspace_id=2)


def test_a_resume_point_outside_the_area_is_never_used(tmp_path):
    planted = checkpoint_dir(tmp_path, 1, "", workspace_id=1) / "step-10"
    planted.mkdir(parents=True)
    (planted / "manifest.json").write_text('{"step": 10, "files": []}')
    folder = checkpoint_dir(tmp_path, 2, "", workspace_id=2)
    resume, note = resolve_resume(folder, str(planted), 2, workspace_area(tmp_path, 2))
    assert resume == ""
    assert "outside this workspace's checkpoint area: ignored" in note
    own = folder / "step-5"
    own.mkdir(parents=True)
    (own / "manifest.json").write_text('{"step": 5, "files": []}')
    assert resolve_resume(folder, str(own), 2, workspace_area(tmp_path, 2)) == (str(own), "")


def test_a_container_mounts_only_its_own_folder_and_the_fence_read_only(tmp_path):
    root = tmp_path / "checkpoints"
    fence = tmp_path / "fence"
    fence.mkdir()
    folder = checkpoint_dir(tmp_path, 7, "shared", workspace_id=3)
    spec = LaunchSpec(
        pod_id=1,
        job_id=7,
        attempt=1,
        rank=0,
        world_size=1,
        image="busybox",
        command="true",
        env={CHECKPOINT_ENV: str(folder)},
        workspace_id=3,
    )
    opts = DockerOptions(node="n1", checkpoint_root=root, fence_dir=fence)
    mounted = checkpoint_folder(root / "ws-3", folder)
    config = container_config(spec, opts, mounted)
    check_config(config, root, fence)
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in config["mounts"]] == [
        (str(fence.resolve()), "/.gpu-fence", True),
        (str(folder), "/checkpoints", False),
    ]
    (root / "ws-4").mkdir()
    with pytest.raises(UnsafeConfig, match="outside"):
        checkpoint_folder(root / "ws-4", folder)  # not in workspace 4's area
    writable = {**config, "mounts": [{**config["mounts"][0], "ReadOnly": False}]}
    with pytest.raises(UnsafeConfig, match="read-only"):
        check_config(writable, root, fence)


# --- end to end: the real agent, the real console ------------------------------------------


def _submit(live_server, token: str, **fields) -> dict:
    response = requests.post(
        f"{live_server.url}/api/v1/jobs",
        json={"image": "busybox", "gpus_per_worker": 0, "cpus_per_worker": 1, **fields},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return response.json()


def _finished(job_id: int) -> Job:
    return wait_for(
        lambda: (job := Job.objects.get(pk=job_id)).status in FINAL and job, f"job {job_id}"
    )


def _lines(job_id: int) -> list[str]:
    pod = Pod.objects.filter(job_id=job_id).order_by("-attempt").first()
    wait_for(lambda: Pod.objects.get(pk=pod.pk).status != PodStatus.RUNNING, "the pod to end")
    return stored_lines(pod)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_two_workspaces_naming_the_same_folder_never_see_each_other(
    agents, live_server, workspace, other_workspace, quota, other_quota, tmp_path
):
    agent = agents("areas")
    registered("areas")
    vision_user = make_user("vera", workspace)
    speech_user = make_user("sam", other_workspace)
    _, vision_token = issue_api_token(vision_user)
    _, speech_token = issue_api_token(speech_user)

    write = 'echo "vision secret" > "$CHECKPOINT_DIR/secret"; echo "wrote $CHECKPOINT_DIR"'
    vision = _submit(
        live_server, vision_token, quota=quota.name, command=write, checkpoint_dir="shared/ckpt"
    )
    assert _finished(vision["id"]).status == "Completed"
    read = (
        'cat "$CHECKPOINT_DIR/secret" 2>/dev/null || echo "no secret"; '
        'echo mine > "$CHECKPOINT_DIR/secret"'
    )
    speech = _submit(
        live_server,
        speech_token,
        quota=other_quota.name,
        command=read,
        checkpoint_dir="shared/ckpt",
    )
    assert _finished(speech["id"]).status == "Completed"
    assert "no secret" in _lines(speech["id"])
    # Naming the other team's default folder names a folder of one's own area.
    peek = _submit(
        live_server,
        speech_token,
        quota=other_quota.name,
        command='ls "$CHECKPOINT_DIR"; echo "listed $CHECKPOINT_DIR"',
        checkpoint_dir=f"job-{vision['id']}",
    )
    _finished(peek["id"])
    listed = _lines(peek["id"])
    assert not any(line == "secret" for line in listed)
    state = tmp_path / "areas" / "checkpoints"
    vision_file = state / f"ws-{workspace.pk}" / "shared" / "ckpt" / "secret"
    assert vision_file.read_text() == "vision secret\n"  # never overwritten
    assert (state / f"ws-{other_workspace.pk}" / "shared" / "ckpt" / "secret").read_text() == (
        "mine\n"
    )
    assert any(line.endswith(f"ws-{other_workspace.pk}/job-{vision['id']}") for line in listed)
    assert agent.terminate() == 0, agent.output()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_restart_resumes_from_the_original_jobs_folder_and_a_planted_path_is_ignored(
    agents, live_server, researcher, api_token, quota, other_workspace, tmp_path
):
    agent = agents("restart-areas")
    registered("restart-areas")
    command = (
        'if [ -f "$CHECKPOINT_DIR/state" ]; then echo "found $(cat "$CHECKPOINT_DIR/state")"; '
        'else echo first > "$CHECKPOINT_DIR/state"; echo fresh; fi'
    )
    first = _submit(live_server, api_token, quota=quota.name, command=command)
    _finished(first["id"])
    assert "fresh" in _lines(first["id"])
    response = requests.post(
        f"{live_server.url}/api/v1/jobs/{first['id']}/restart",
        headers={"Authorization": f"Bearer {api_token}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    again = response.json()
    assert Job.objects.get(pk=again["id"]).checkpoint_dir == f"job-{first['id']}"
    _finished(again["id"])
    assert "found first" in _lines(again["id"])

    # A resume point in another workspace's area (as if planted in the job's row) is not
    # read: the agent says so in the worker's log and gives no RESUME_FROM.
    foreign = tmp_path / "restart-areas" / "checkpoints" / f"ws-{other_workspace.pk}" / "step-1"
    foreign.mkdir(parents=True)
    (foreign / "manifest.json").write_text('{"step": 1, "files": []}')
    node = registered("restart-areas")
    planted = Job.objects.create(
        workspace=quota.workspaces.get(),
        quota=quota,
        owner=researcher,
        name="planted",
        image="busybox",
        command='echo "resume=${RESUME_FROM:-none}"',
        resume_from=str(foreign),
        status="Starting",
    )
    pod = Pod.objects.create(job=planted, attempt=1, rank=0, node=node, charged_quota=quota, gpus=0)
    wait_for(lambda: "resume=none" in stored_lines(pod), "the planted job's output")
    assert any(
        "outside this workspace's checkpoint area: ignored" in line for line in stored_lines(pod)
    )
    assert agent.terminate() == 0, agent.output()
