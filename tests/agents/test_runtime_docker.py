"""The docker runtime's container configuration (pure) and its engine-specific behaviour
against podman's Docker-API service: what a created container really looks like, image
pull failures, and the engine refusing a second container for one pod attempt."""

import threading
import time
import uuid
from pathlib import Path

import docker
import pytest
import requests

from agents.node.ledger import Ledger
from agents.node.runtimes.base import CHECKPOINT_ENV, PROGRESS_ENV, LaunchSpec, WorkerState
from agents.node.runtimes.containers import (
    DockerOptions,
    DockerRuntime,
    UnsafeConfig,
    check_config,
    checkpoint_folder,
    container_config,
)
from agents.node.state import StateStore
from protocol import preflight
from protocol.agent import WorkerSpec
from protocol.units import ResumeIdentity
from tests.agents.conftest import TEST_IMAGE, remove_node_containers
from tests.agents.test_runtime_process import Recorder


def spec(**extra) -> LaunchSpec:
    fields = {
        "pod_id": 11,
        "job_id": 5,
        "attempt": 2,
        "rank": 1,
        "world_size": 2,
        "image": TEST_IMAGE,
        "command": "echo hi",
        "gpu_indices": (3, 5),
        "gpu_uuids": ("GPU-3", "GPU-5"),
        "cpus": 8,
        "memory_gb": 64,
        **extra,
    }
    return LaunchSpec(**fields)


def test_the_config_requests_exactly_the_assigned_gpus_with_limits_and_labels(tmp_path):
    folder = checkpoint_folder(tmp_path, tmp_path / "job-5")
    env = {CHECKPOINT_ENV: str(folder), PROGRESS_ENV: str(folder / ".progress" / "p.json")}
    config = container_config(spec(env=env), DockerOptions(node="n1", gpus="nvidia"), folder)
    check_config(config, tmp_path)
    (request,) = config["device_requests"]
    assert (request["Driver"], request["DeviceIDs"], request["Capabilities"]) == (
        "nvidia",
        ["GPU-3", "GPU-5"],
        [["gpu", "compute", "utility"]],
    )
    assert config["environment"]["CUDA_VISIBLE_DEVICES"] == "GPU-3,GPU-5"  # by UUID
    assert config["environment"][CHECKPOINT_ENV] == "/checkpoints"
    assert config["environment"][PROGRESS_ENV] == "/checkpoints/.progress/p.json"
    assert (config["nano_cpus"], config["mem_limit"]) == (8 * 10**9, "64g")
    assert config["privileged"] is False and config["init"] is True
    labels = config["labels"]
    assert {k.rsplit(".", 1)[1]: v for k, v in labels.items()} == {
        "managed": "true",
        "node": "n1",
        "job": "5",
        "pod": "11",
        "attempt": "2",
        "epoch": "2",
        "rank": "1",
        "gpus": "3,5",
        "gpu-uuids": "GPU-3,GPU-5",
        "workspace": "0",
    }
    assert [(m["Source"], m["Target"], m["Type"]) for m in config["mounts"]] == [
        (str(folder), "/checkpoints", "bind")
    ]


def test_without_a_checkpoint_folder_nothing_is_mounted_and_host_paths_are_dropped(tmp_path):
    config = container_config(
        spec(env={CHECKPOINT_ENV: "/var/lib/x"}), DockerOptions(node="n1", gpus="off"), None
    )
    check_config(config, None)
    assert "mounts" not in config and "device_requests" not in config
    assert CHECKPOINT_ENV not in config["environment"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"privileged": True}, "never privileged"),
        ({"network_mode": "host"}, "not allowed: network_mode"),
        ({"pid_mode": "host"}, "not allowed: pid_mode"),
        ({"ipc_mode": "host"}, "not allowed: ipc_mode"),
        ({"devices": ["/dev/sda:/dev/sda"]}, "not allowed: devices"),
        ({"cap_add": ["SYS_ADMIN"]}, "not allowed: cap_add"),
        ({"volumes": {"/var/run/docker.sock": {}}}, "not allowed: volumes"),
        ({"security_opt": ["seccomp=unconfined"]}, "no-new-privileges"),
        (
            {"device_requests": [{"Driver": "nvidia", "Count": -1, "DeviceIDs": []}]},
            "explicit device IDs only",
        ),
    ],
)
def test_anything_outside_the_allowlist_is_refused(tmp_path, extra, message):
    config = {**container_config(spec(), DockerOptions(node="n1"), None), **extra}
    with pytest.raises(UnsafeConfig, match=message):
        check_config(config, tmp_path)


def test_bind_mounts_only_under_the_checkpoint_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    for source in ["/var/run/docker.sock", str(tmp_path), str(root)]:
        config = container_config(spec(), DockerOptions(node="n1"), Path(source))
        with pytest.raises(UnsafeConfig, match="not under the checkpoint root"):
            check_config(config, root)
    config = container_config(spec(), DockerOptions(node="n1"), root / "job-5")
    with pytest.raises(UnsafeConfig, match="nothing may be mounted"):
        check_config(config, None)


def test_a_symlink_out_of_the_checkpoint_root_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "job-5").symlink_to("/etc")
    with pytest.raises(UnsafeConfig, match="outside"):
        checkpoint_folder(root, root / "job-5")
    with pytest.raises(UnsafeConfig, match="outside"):
        checkpoint_folder(root, root / "job-6" / ".." / "..")
    assert checkpoint_folder(root, root / "job-7") == (root / "job-7").resolve()


# --- against the engine ---


@pytest.fixture
def engine(docker_url, tmp_path):
    node = f"t{uuid.uuid4().hex[:10]}"
    rec = Recorder()
    (tmp_path / "ckpt").mkdir()
    opts = DockerOptions(node=node, checkpoint_root=tmp_path / "ckpt", gpus="off")
    rt = DockerRuntime(opts, rec.on_line, rec.on_exit, base_url=docker_url)
    client = docker.DockerClient(base_url=docker_url)
    yield rt, rec, client, node
    rt.shutdown(0)
    remove_node_containers(docker_url, node)
    client.close()


def test_the_created_container_is_confined(engine, tmp_path):
    rt, rec, client, node = engine
    folder = tmp_path / "ckpt" / "job-5"
    rt.launch(
        spec(
            command="echo ready; sleep 600",
            gpu_indices=(),
            cpus=1,
            memory_gb=1,
            env={CHECKPOINT_ENV: str(folder)},
        )
    )
    rec.wait_line(11, "ready")
    (container,) = client.containers.list(filters={"label": f"io.gpu-console.node={node}"})
    host = container.attrs["HostConfig"]
    assert host["Privileged"] is False
    assert host["NetworkMode"] != "host" and host["PidMode"] in ("", "private")
    assert host["IpcMode"] != "host"
    assert not host.get("Devices") and not host.get("CapAdd")
    assert [(m["Source"], m["Destination"]) for m in container.attrs["Mounts"]] == [
        (str(folder.resolve()), "/checkpoints")
    ]
    assert host["NanoCpus"] == 10**9 and host["Memory"] == 2**30
    assert container.labels["io.gpu-console.pod"] == "11"
    assert container.name == f"gpu-{node}-pod11-a2"


def test_a_pull_failure_fails_the_worker_with_the_reason(engine):
    rt, rec, _client, _node = engine
    rt.launch(spec(image="localhost/no-such-image:1", gpu_indices=()))
    rec.wait_exit(11)
    (s,) = rt.workers()
    assert (s.running, s.exit_code) == (False, None)
    assert s.error.startswith("image pull failed: localhost/no-such-image:1:")
    assert rec.lines[11][0] == "[agent] pulling image localhost/no-such-image:1"
    assert rec.lines[11][-1] == f"[agent] {s.error}"


def test_the_engine_refuses_a_second_container_for_one_pod_attempt(engine, docker_url):
    rt, rec, client, node = engine
    rt.launch(spec(command="echo ready; sleep 600", gpu_indices=()))
    rec.wait_line(11, "ready")
    # A second runtime of the same node (as after a crash before workers.json was saved)
    # launching the same pod attempt takes over the existing container.
    other_rec = Recorder()
    other = DockerRuntime(rt.opts, other_rec.on_line, other_rec.on_exit, base_url=docker_url)
    other.launch(spec(command="echo ready; sleep 600", gpu_indices=()))
    other_rec.wait_line(11, "ready")
    containers = client.containers.list(all=True, filters={"label": f"io.gpu-console.node={node}"})
    assert len(containers) == 1
    assert other.workers()[0].container_id == rt.workers()[0].container_id


def test_a_worker_stopped_while_its_image_is_prepared_never_starts(engine, monkeypatch):
    rt, rec, client, node = engine
    gate = threading.Event()
    real = rt._ensure_image

    def slow_pull(worker, image):  # a long pull, during which the stop arrives
        gate.wait(15)
        real(worker, image)

    monkeypatch.setattr(rt, "_ensure_image", slow_pull)
    rt.launch(spec(command="echo should not run", gpu_indices=()))
    assert rt.workers()[0].starting
    rt.stop(11, 30)
    gate.set()
    rec.wait_exit(11)
    (s,) = rt.workers()
    assert (s.running, s.exit_code, s.error) == (
        False,
        None,
        "stopped before the container started",
    )
    assert client.containers.list(all=True, filters={"label": f"io.gpu-console.node={node}"}) == []


def test_a_follow_stream_that_ends_early_loses_no_line(engine, monkeypatch):
    """An engine may end a follow stream before the container's last lines (podman's
    compat API under load): the stored log is read once more, and each line comes once."""
    rt, rec, _, _ = engine
    real, real_wait = rt.stream_api.logs, rt.stream_api.wait
    follows = []

    def cut_short(container, **kwargs):
        follows.append(kwargs["follow"])
        if not kwargs["follow"]:
            return real(container, **kwargs)
        real_wait(container)  # every line written; then the stream ends after the first
        return iter(list(real(container, **{**kwargs, "follow": False}))[:1])

    monkeypatch.setattr(rt.stream_api, "logs", cut_short)
    rt.launch(spec(command='for i in $(seq 1 50); do echo "line $i"; done', gpu_indices=()))
    rec.wait_exit(11)  # reported once the output is read to its end
    assert rec.lines[11] == [f"line {i}" for i in range(1, 51)]
    assert follows == [True, False]


def test_a_resume_whose_image_changed_is_refused_after_the_pull(engine):
    """docs/results.md, "Resume without duplicates": the engine resolves the image only at
    the start, so the docker runtime compares its id with the run's before creating the
    container; a changed one ends the worker unstarted, `ended_by: resume_refused`."""
    rt, rec, client, node = engine
    actual = rt.image_id(TEST_IMAGE)
    old = ResumeIdentity(run_id="train-7", carried=2, units="partitions", image_digest="0" * 64)
    rt.launch(spec(command="echo should not run", gpu_indices=(), resume_identity=old))
    rec.wait_exit(11)
    (s,) = rt.workers()
    assert (s.running, s.exit_code, s.ended_by) == (False, None, "resume_refused")
    assert s.error == (
        f"launch failed: resume refused: the image 000000000000 → "
        f"{actual.removeprefix('sha256:')[:12]} changed since run train-7; its 2 accepted "
        "partitions were made by the old one. Restart from scratch (a new job in a folder of "
        "its own, nothing carried), or restore it."
    )
    assert client.containers.list(all=True, filters={"label": f"io.gpu-console.node={node}"}) == []
    # The same image: it starts.
    same = ResumeIdentity(run_id="train-7", carried=2, image_digest=actual)
    rt.launch(spec(pod_id=12, command="echo resumed", gpu_indices=(), resume_identity=same))
    rec.wait_line(12, "resumed")


def test_a_follow_stream_left_open_after_the_exit_is_cut_and_the_rest_read(engine, monkeypatch):
    """podman's compat API under load sometimes keeps a follow stream open long after the
    container exited (seen past 30 s): the exit is reported a moment later all the same,
    with every line once, the last ones read from the stored log."""
    rt, rec, _, _ = engine
    real = rt.stream_api.logs
    follows = []

    class Hanging:  # yields the first line, then blocks until closed, like the engine
        def __init__(self, lines):
            self.lines, self.closed = lines, threading.Event()

        def __iter__(self):
            yield self.lines[0]
            self.closed.wait(60)
            raise requests.ConnectionError("closed")

        def close(self):
            self.closed.set()

    def left_open(container, **kwargs):
        follows.append(kwargs["follow"])
        if not kwargs["follow"]:
            return real(container, **kwargs)
        rt.stream_api.wait(container)
        return Hanging(list(real(container, **{**kwargs, "follow": False})))

    monkeypatch.setattr(rt.stream_api, "logs", left_open)
    started = time.monotonic()
    rt.launch(spec(command='for i in $(seq 1 30); do echo "line $i"; done', gpu_indices=()))
    rec.wait_exit(11)
    assert time.monotonic() - started < 20  # not READER_JOIN_TIMEOUT (30 s) nor more
    assert rec.lines[11] == [f"line {i}" for i in range(1, 31)]
    assert follows == [True, False]


def test_the_validator_runs_in_the_jobs_image_on_a_read_only_result(engine, tmp_path):
    """docs/results.md, "The validator", under the docker runtime: rank 0's agent runs it in
    a container of the job's image, the result folder mounted read-only at RESULT_DIR; its
    exit code and last lines ride on the exit; the container is removed."""
    rt, _, client, node = engine
    ledger = Ledger(StateStore(tmp_path / "state"), rt)
    check = (
        'echo "in $PWD ($RESULT_DIR)"; ls; '
        "if touch x 2>/dev/null; then echo WROTE; fi; cat p1.txt; exit 4"
    )
    worker = WorkerSpec(
        pod_id=7, job_id=3, attempt=1, rank=0, world_size=1, image=TEST_IMAGE,
        command="true", result_validator=check,
    )  # fmt: skip
    ledger.record_launch(7, 1)
    ledger.launch_spec(worker, state_dir=tmp_path / "state", runtime="docker", node=node)
    result = tmp_path / "state" / "checkpoints" / "job-3" / "output" / "result"
    (result / "p1.txt").write_text("rows 500\n")
    ended = {7: WorkerState(pod_id=7, attempt=1, running=False, exit_code=0)}
    deadline = time.monotonic() + 60
    while True:
        (report,), exited = ledger.reports(ended, [])
        if exited:
            break
        assert report.state == "running" and time.monotonic() < deadline  # while it runs
        time.sleep(0.1)
    assert report.validator.exit_code == 4
    lines = report.validator.output.splitlines()
    assert lines[0] == "in /result (/result)" and "p1.txt" in lines
    assert "WROTE" not in lines and lines[-1] == "rows 500"
    assert not (result / "x").exists()
    assert client.containers.list(all=True, filters={"label": f"io.gpu-console.node={node}"}) == []


@pytest.mark.parametrize(
    ("command", "code", "last"),
    [
        ('if [ "$RUN_PREFLIGHT" = 1 ]; then echo dry; else echo wet; fi', 0, "wet"),
        ('[ "$RUN_PREFLIGHT" = 1 ] && sleep 300; echo wet', 3, "no unit accepted"),
    ],
    ids=["passes", "past-its-limit"],
)
def test_the_preflight_runs_in_a_busybox_image(engine, command, code, last):
    """The preflight's wrapper (protocol.preflight) is a POSIX script: busybox's sh,
    setsid, sleep, ls and grep run it as the host's do."""
    _, _, client, node = engine
    container = client.containers.run(
        TEST_IMAGE,
        ["/bin/sh", "-c", preflight.wrapped(2)],
        environment={"OUTPUT_DIR": "/tmp/attempt-1", preflight.COMMAND_ENV: command},
        labels={"io.gpu-console.node": node},
        detach=True,
    )
    assert container.wait(timeout=60)["StatusCode"] == code
    lines = container.logs().decode().splitlines()
    assert lines[0] == "[preflight] the command with RUN_PREFLIGHT=1, at most 2 s"
    assert last in lines[-1], lines
