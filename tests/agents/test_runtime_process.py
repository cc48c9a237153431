"""ProcessRuntime against real `/bin/sh -c` processes (no Django needed)."""

import io
import os
import sys
import threading
import time

import pytest

from agents.node.runtimes.base import LaunchSpec, injected_env, normalize_exit_code
from agents.node.runtimes.processes import MAX_LINE_BYTES, ProcessRuntime, split_output

WAIT = 15.0  # bound on every wait; these finish in well under a second


class Recorder:
    """Collects what the runtime reports, so tests can wait for a line or an exit."""

    def __init__(self) -> None:
        self.lines: dict[int, list[str]] = {}
        self.exits: list[int] = []
        self._cond = threading.Condition()

    def on_line(self, pod_id: int, line: str, source: bool = True) -> None:
        with self._cond:
            self.lines.setdefault(pod_id, []).append(line)
            self._cond.notify_all()

    def on_exit(self, pod_id: int) -> None:
        with self._cond:
            self.exits.append(pod_id)
            self._cond.notify_all()

    def wait_for(self, predicate) -> None:
        with self._cond:
            assert self._cond.wait_for(predicate, WAIT), (self.lines, self.exits)

    def wait_line(self, pod_id: int, text: str) -> None:
        self.wait_for(lambda: text in self.lines.get(pod_id, []))

    def wait_exit(self, pod_id: int) -> None:
        self.wait_for(lambda: pod_id in self.exits)


@pytest.fixture
def rec():
    return Recorder()


@pytest.fixture
def runtime(tmp_path, rec):
    rt = ProcessRuntime(
        tmp_path / "work",
        rec.on_line,
        rec.on_exit,
        base_env={"PATH": os.environ["PATH"], "GPU_AGENT_BOOTSTRAP_TOKEN": "secret"},
    )
    yield rt
    rt.shutdown(0)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def spec(pod_id: int, command: str, **extra) -> LaunchSpec:
    fields = {
        "job_id": 42,
        "attempt": 1,
        "rank": 0,
        "world_size": 1,
        "image": "",
        "gpu_indices": (0,),
        **extra,
    }
    return LaunchSpec(pod_id=pod_id, command=command, **fields)


def state(runtime, pod_id):
    return next(s for s in runtime.workers() if s.pod_id == pod_id)


def test_output_is_captured_in_order_and_exit_zero(runtime, rec):
    runtime.launch(spec(1, 'for i in 1 2 3 4 5; do echo "out $i"; echo "err $i" >&2; done'))
    rec.wait_exit(1)
    assert rec.lines[1] == [f"{kind} {i}" for i in range(1, 6) for kind in ("out", "err")]
    s = state(runtime, 1)
    assert (s.running, s.exit_code, s.error) == (False, 0, "")
    assert s.container_id.startswith("process:")


def test_exit_code_and_error_tail(runtime, rec):
    runtime.launch(spec(2, "echo preparing; echo 'RuntimeError: CUDA out of memory' >&2; exit 3"))
    rec.wait_exit(2)
    s = state(runtime, 2)
    assert s.exit_code == 3
    assert s.error == "preparing\nRuntimeError: CUDA out of memory"


def test_the_error_tail_quotes_the_worker_not_the_agent(runtime, rec):
    runtime.launch(spec(9, "echo 'ValueError: bad shape'; exit 1", image="busybox"))
    rec.wait_exit(9)
    assert rec.lines[9][0].startswith("[agent] process runtime: image 'busybox' is ignored")
    assert state(runtime, 9).error == "ValueError: bad shape"


def test_environment_of_a_worker(runtime, rec):
    runtime.launch(
        spec(
            3,
            'echo "$CUDA_VISIBLE_DEVICES|$RANK|$WORLD_SIZE|$MASTER_ADDR|$JOB_ID|$POD_ID|$ATTEMPT'
            '|$PYTHONUNBUFFERED|$LR|${GPU_AGENT_BOOTSTRAP_TOKEN:-unset}"; pwd',
            gpu_indices=(2, 5),
            rank=1,
            world_size=2,
            attempt=3,
            env={"LR": "0.1", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
        )
    )
    rec.wait_exit(3)
    # The job's env cannot widen its GPUs; the agent's secrets never reach the worker.
    assert rec.lines[3][0] == "2,5|1|2|127.0.0.1|42|3|3|1|0.1|unset"
    assert rec.lines[3][1].endswith("/work/pod-3-3")


def test_the_image_is_ignored_with_a_line_saying_so(runtime, rec):
    runtime.launch(spec(4, "echo hi", image="pytorch:2.4"))
    rec.wait_exit(4)
    assert rec.lines[4] == [
        "[agent] process runtime: image 'pytorch:2.4' is ignored; "
        "the command runs directly on this host",
        "hi",
    ]


def test_sigterm_is_honoured(runtime, rec):
    runtime.launch(
        spec(5, 'trap "echo saving; exit 0" TERM; echo ready; while :; do sleep 0.05; done')
    )
    rec.wait_line(5, "ready")
    assert state(runtime, 5).running
    runtime.stop(5, grace_seconds=30)
    rec.wait_exit(5)
    s = state(runtime, 5)
    assert s.exit_code == 0
    agent_line = rec.lines[5].index("[agent] stopping: sending SIGTERM, grace 30s")
    assert rec.lines[5][-1] == "saving" and agent_line < len(rec.lines[5]) - 1


def test_the_grace_belongs_to_the_whole_worker_not_only_its_shell(runtime, rec, tmp_path):
    """`sh -c "python train.py; …"` dies on SIGTERM at once; the training process it started
    must still get its grace to save before the worker counts as exited."""
    saved = tmp_path / "saved"
    script = tmp_path / "train.py"
    script.write_text(
        "import signal, sys, time\n"
        "def save(*_):\n"
        "    time.sleep(1.0)  # a checkpoint takes a while\n"
        f"    open({str(saved)!r}, 'w').write('ok')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, save)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    # The trailing command keeps sh from exec-ing python: sh stays the main process.
    runtime.launch(spec(15, f"{sys.executable} {script}; echo unreachable"))
    rec.wait_line(15, "ready")
    started = time.monotonic()
    runtime.stop(15, grace_seconds=10)
    rec.wait_exit(15)
    assert saved.read_text() == "ok", "the training process was killed before it saved"
    assert time.monotonic() - started < 10, "the worker waited for the whole grace"
    assert "[agent] grace of 10s ran out: sending SIGKILL" not in rec.lines[15]


def test_sigkill_after_the_grace_for_a_worker_that_ignores_sigterm(runtime, rec):
    runtime.launch(
        spec(6, 'trap "echo ignoring TERM" TERM; echo ready; while :; do sleep 0.05; done')
    )
    rec.wait_line(6, "ready")
    started = time.monotonic()
    runtime.stop(6, grace_seconds=0.5)
    rec.wait_exit(6)
    assert time.monotonic() - started >= 0.5
    assert state(runtime, 6).exit_code == 137
    assert "ignoring TERM" in rec.lines[6]
    assert "[agent] grace of 0.5s ran out: sending SIGKILL" in rec.lines[6]


def test_a_shorter_grace_brings_the_kill_forward(runtime, rec):
    runtime.launch(spec(7, 'trap "" TERM; echo ready; while :; do sleep 0.05; done'))
    rec.wait_line(7, "ready")
    runtime.stop(7, grace_seconds=3600)
    runtime.stop(7, grace_seconds=0)  # e.g. a graceful stop escalated to terminate
    rec.wait_exit(7)
    assert state(runtime, 7).exit_code == 137


def test_leftover_background_processes_die_with_the_worker(runtime, rec, tmp_path):
    pidfile = tmp_path / "bg.pid"
    runtime.launch(spec(8, f"sleep 600 & echo $! > {pidfile}; echo started"))
    rec.wait_exit(8)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{pid}/stat") as f:  # a zombie awaiting its reaper is dead too
            if f.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        pytest.fail("the background process outlived its worker")
    assert state(runtime, 8).exit_code == 0


def test_forget_drops_only_exited_workers(runtime, rec):
    runtime.launch(spec(9, "echo ready; sleep 600"))
    rec.wait_line(9, "ready")
    runtime.forget(9)
    assert [s.pod_id for s in runtime.workers()] == [9]
    runtime.stop(9, 0)
    rec.wait_exit(9)
    runtime.forget(9)
    assert runtime.workers() == []


def test_shutdown_stops_every_worker_and_waits(runtime, rec):
    for pod_id in (10, 11):
        runtime.launch(spec(pod_id, 'trap "exit 0" TERM; echo ready; while :; do sleep 0.05; done'))
        rec.wait_line(pod_id, "ready")
    runtime.shutdown(5)
    assert [(s.pod_id, s.running, s.exit_code) for s in runtime.workers()] == [
        (10, False, 0),
        (11, False, 0),
    ]


def test_kill_leftovers_finds_workers_by_their_marker(tmp_path, rec):
    first = ProcessRuntime(tmp_path / "w", rec.on_line, rec.on_exit)
    first.launch(spec(12, "echo ready; sleep 600"))
    rec.wait_line(12, "ready")
    # A new runtime (a restarted agent) does not hold the worker, but can find it.
    second = ProcessRuntime(tmp_path / "w", rec.on_line, rec.on_exit)
    assert second.kill_leftovers({"999.1"}) == 0
    assert second.kill_leftovers({"12.1"}) >= 1
    rec.wait_exit(12)
    assert state(first, 12).exit_code == 137


# --- pure pieces ---


def test_split_output_splits_long_lines_and_replaces_invalid_utf8():
    out: list[str] = []
    long_line = b"a" * (MAX_LINE_BYTES + 10)
    exact = b"b" * MAX_LINE_BYTES
    # A multi-byte character straddling the split point is kept whole.
    straddle = b"c" * (MAX_LINE_BYTES - 1) + "é".encode() + b"d"
    data = long_line + b"\n" + exact + b"\n" + b"bad \xff\xfe bytes\n" + straddle + b"\nlast"
    split_output(io.BufferedReader(io.BytesIO(data)), out.append)
    assert out == [
        "a" * MAX_LINE_BYTES,
        "a" * 10,
        "b" * MAX_LINE_BYTES,
        "bad \ufffd\ufffd bytes",
        "c" * (MAX_LINE_BYTES - 1),
        "éd",
        "last",
    ]


def test_signal_deaths_read_like_a_shell():
    assert normalize_exit_code(-15) == 143
    assert normalize_exit_code(-9) == 137
    assert normalize_exit_code(3) == 3


def test_injected_env_is_complete():
    env = injected_env(spec(1, "x", gpu_indices=(0, 1, 2)))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    assert env["MASTER_PORT"] == str(20000 + 42)


def test_an_escaped_process_holding_the_output_does_not_hide_the_exit_and_dies_too(
    runtime, rec, tmp_path
):
    pidfile = tmp_path / "escaped.pid"
    runtime.launch(
        spec(13, f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 600' & sleep 0.2; echo done")
    )
    rec.wait_exit(13)
    assert state(runtime, 13).exit_code == 0
    assert "done" in rec.lines[13]
    # It carried the worker's marker: it died with the worker, as in a container.
    escaped = int(pidfile.read_text())
    assert not alive(escaped)
