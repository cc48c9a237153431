"""One behavioural suite, two runtimes: the process runtime and the docker runtime against a
real Docker-API engine (podman's service, scripts/podman-service). No Django needed.

Containers run without GPU device requests (`gpus="off"`): the engine here has no NVIDIA
runtime; the device requests themselves are checked in test_runtime_docker.py.
"""

import os
import uuid

import pytest

from agents.node.runtimes.base import LaunchSpec
from agents.node.runtimes.processes import ProcessRuntime
from tests.agents.conftest import TEST_IMAGE, remove_node_containers
from tests.agents.test_runtime_process import Recorder


@pytest.fixture(params=["process", "docker"])
def kind(request) -> str:
    return request.param


@pytest.fixture
def make_runtime(kind, tmp_path, request):
    """Build runtimes of the parametrised kind sharing one node (and work root), as an
    agent and the agent restarted after it would."""
    node = f"t{uuid.uuid4().hex[:10]}"
    made = []
    url = request.getfixturevalue("docker_url") if kind == "docker" else None

    def build(rec: Recorder):
        if kind == "process":
            rt = ProcessRuntime(
                tmp_path / "work", rec.on_line, rec.on_exit, base_env={"PATH": os.environ["PATH"]}
            )
        else:
            from agents.node.runtimes.containers import DockerOptions, DockerRuntime

            (tmp_path / "ckpt").mkdir(exist_ok=True)
            opts = DockerOptions(node=node, checkpoint_root=tmp_path / "ckpt", gpus="off")
            rt = DockerRuntime(opts, rec.on_line, rec.on_exit, base_url=url)
        made.append(rt)
        return rt

    yield build
    for rt in made:
        rt.shutdown(0)
    if url:
        remove_node_containers(url, node)


def spec(kind: str, pod_id: int, command: str, **extra) -> LaunchSpec:
    fields = {
        "job_id": 42,
        "attempt": 1,
        "rank": 0,
        "world_size": 1,
        "image": TEST_IMAGE if kind == "docker" else "",
        "gpu_indices": (),
        **extra,
    }
    return LaunchSpec(pod_id=pod_id, command=command, **fields)


def state(rt, pod_id):
    return next(s for s in rt.workers() if s.pod_id == pod_id)


def test_runs_with_ordered_logs_and_exit_zero(kind, make_runtime):
    rec = Recorder()
    rt = make_runtime(rec)
    rt.launch(spec(kind, 1, 'for i in $(seq 1 300); do echo "line $i"; done'))
    rec.wait_exit(1)
    assert rec.lines[1] == [f"line {i}" for i in range(1, 301)]
    s = state(rt, 1)
    assert (s.running, s.exit_code, s.error) == (False, 0, "")
    assert s.container_id


def test_exit_code_and_error_tail(kind, make_runtime):
    rec = Recorder()
    rt = make_runtime(rec)
    rt.launch(spec(kind, 2, "echo preparing; echo 'RuntimeError: CUDA out of memory'; exit 3"))
    rec.wait_exit(2)
    s = state(rt, 2)
    assert s.exit_code == 3
    assert s.error == "preparing\nRuntimeError: CUDA out of memory"


def test_environment(kind, make_runtime):
    rec = Recorder()
    rt = make_runtime(rec)
    rt.launch(
        spec(
            kind,
            3,
            'echo "$RANK|$WORLD_SIZE|$MASTER_ADDR|$JOB_ID|$POD_ID|$ATTEMPT|$LR'
            '|${GPU_AGENT_BOOTSTRAP_TOKEN:-unset}"',
            rank=1,
            world_size=2,
            attempt=3,
            env={"LR": "0.1", "RANK": "7"},
        )
    )
    rec.wait_exit(3)
    # The job's env cannot override what the agent sets; agent secrets never leak.
    assert rec.lines[3] == ["1|2|127.0.0.1|42|3|3|0.1|unset"]


def test_sigterm_is_honoured(kind, make_runtime):
    rec = Recorder()
    rt = make_runtime(rec)
    rt.launch(
        spec(kind, 5, 'trap "echo saving; exit 0" TERM; echo ready; while :; do sleep 0.05; done')
    )
    rec.wait_line(5, "ready")
    assert state(rt, 5).running
    rt.stop(5, grace_seconds=30)
    rec.wait_exit(5)
    assert state(rt, 5).exit_code == 0
    lines = rec.lines[5]
    assert lines.index("[agent] stopping: sending SIGTERM, grace 30s") < lines.index("saving")


def test_sigkill_after_the_grace(kind, make_runtime):
    rec = Recorder()
    rt = make_runtime(rec)
    rt.launch(
        spec(kind, 6, 'trap "echo ignoring TERM" TERM; echo ready; while :; do sleep 0.05; done')
    )
    rec.wait_line(6, "ready")
    rt.stop(6, grace_seconds=0.5)
    rec.wait_exit(6)
    assert state(rt, 6).exit_code == 137
    assert "ignoring TERM" in rec.lines[6]
    assert "[agent] grace of 0.5s ran out: sending SIGKILL" in rec.lines[6]


def test_a_restarted_runtime_adopts_a_running_worker_and_skips_shipped_lines(
    kind, make_runtime, tmp_path
):
    flag = tmp_path / "go"
    first_rec = Recorder()
    first = make_runtime(first_rec)
    if kind == "docker":  # the job's checkpoint folder is the one thing mounted
        flag = tmp_path / "ckpt" / "job-42" / "go"
        wait_for_flag = "while [ ! -e /checkpoints/go ]; do sleep 0.05; done"
    else:
        wait_for_flag = f"while [ ! -e {flag} ]; do sleep 0.05; done"
    command = f"echo one; echo two; echo three; {wait_for_flag}; echo four; exit 6"
    extra = {}
    if kind == "docker":
        from agents.node.runtimes.base import CHECKPOINT_ENV

        extra["env"] = {CHECKPOINT_ENV: str(tmp_path / "ckpt" / "job-42")}
    first.launch(spec(kind, 7, command, **extra))
    first_rec.wait_line(7, "three")
    before = state(first, 7).container_id

    second_rec = Recorder()
    second = make_runtime(second_rec)  # the agent restarted (the first one is "dead")
    prepared = []
    assert second.adopt({7: 2}, lambda p, a: prepared.append((p, a))) == {7: 1}
    assert prepared == [(7, 1)]
    assert state(second, 7).running and state(second, 7).container_id == before
    flag.touch()
    second_rec.wait_exit(7)
    assert second_rec.lines[7] == ["three", "four"]
    assert state(second, 7).exit_code == 6
    assert state(second, 7).error.endswith("one\ntwo\nthree\nfour")


def test_a_worker_that_ended_while_no_agent_watched_is_adopted_with_its_exit(kind, make_runtime):
    first_rec = Recorder()
    first = make_runtime(first_rec)
    first.launch(spec(kind, 8, "echo a; echo b; exit 7"))
    first_rec.wait_exit(8)
    second_rec = Recorder()
    second = make_runtime(second_rec)
    assert second.adopt({8: 1}) == {8: 1}
    second_rec.wait_exit(8)
    assert second_rec.lines[8] == ["b"]
    assert (state(second, 8).running, state(second, 8).exit_code) == (False, 7)
    second.forget(8)
    assert make_runtime(Recorder()).adopt({}) == {}  # forgotten: nothing left to adopt
