"""The simulated runtime (benchmarks): a worker is a timer of the job's SIM_RUN_SECONDS."""

import threading
from pathlib import Path

import pytest

from agents.node.config import AgentConfig, make_runtime
from agents.node.runtimes.base import LaunchError, LaunchSpec
from agents.node.runtimes.simulated import SimulatedRuntime, run_seconds


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[int, str, bool]] = []
        self.exited = threading.Event()

    def on_line(self, pod_id: int, line: str, source: bool) -> None:
        self.lines.append((pod_id, line, source))

    def on_exit(self, pod_id: int) -> None:
        self.exited.set()


def spec(pod_id: int = 7, **env: str) -> LaunchSpec:
    return LaunchSpec(pod_id=pod_id, job_id=1, attempt=1, rank=0, world_size=1, image="x",
                      command="train", env=env, gpu_indices=(0, 1))  # fmt: skip


def test_runs_for_its_time_then_exits_with_its_code():
    rec = Recorder()
    rt = SimulatedRuntime(rec.on_line, rec.on_exit)
    rt.launch(spec(SIM_RUN_SECONDS="0.2", SIM_EXIT_CODE="3"))
    (state,) = rt.workers()
    assert state.running and state.gpu_indices == (0, 1) and state.exit_code is None
    assert rec.exited.wait(5)
    (state,) = rt.workers()
    assert not state.running and state.exit_code == 3
    assert [line for _, line, _ in rec.lines][-1] == "simulated worker: done, exit 3"
    rt.forget(7)
    assert rt.workers() == []


def test_stop_ends_it_at_once_as_sigterm():
    rec = Recorder()
    rt = SimulatedRuntime(rec.on_line, rec.on_exit)
    rt.launch(spec(SIM_RUN_SECONDS="60"))
    rt.stop(7, grace_seconds=30)
    assert rec.exited.wait(1)
    (state,) = rt.workers()
    assert state.exit_code == 143
    rt.shutdown(1)  # nothing left running: returns at once


def test_bad_run_time_is_a_launch_error_and_launches_nothing():
    rt = SimulatedRuntime(Recorder().on_line, Recorder().on_exit)
    with pytest.raises(LaunchError, match="SIM_RUN_SECONDS"):
        rt.launch(spec(SIM_RUN_SECONDS="soon"))
    with pytest.raises(LaunchError, match="between"):
        run_seconds({"SIM_RUN_SECONDS": "-1"})
    assert rt.workers() == []


def test_the_agent_config_selects_it(tmp_path: Path):
    rec = Recorder()
    config = AgentConfig(server="http://x", name="n", state_dir=tmp_path, runtime="simulated")
    runtime = make_runtime(config, tmp_path, rec.on_line, rec.on_exit)
    assert runtime.name == "simulated"
    assert runtime.adopt({}) == {} and runtime.kill_leftovers({"1.1"}) == 0
