"""The simulated runtime: a worker is a timer, not a process (benchmarks at scale, e.g.
bench/kueue.py runs 15,000 jobs through real agents).

A worker "runs" from its launch for `SIM_RUN_SECONDS` seconds (from the job's environment;
default 1) and then exits with `SIM_EXIT_CODE` (default 0). It prints one line when it
starts and one when it ends, so the log path is exercised too. Stop: SIGTERM ends it with
143 at once (a simulated worker honours its grace instantly). Nothing outlives the agent:
`adopt` finds nothing and a restarted agent reports the old workers lost, as after a reboot.

Never a real workload: the agent's `--runtime simulated` is for benchmarks and tests.
"""

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping

from agents.node.runtimes.base import (
    ExitSink,
    LaunchError,
    LaunchSpec,
    LineSink,
    SourceLines,
    Worker,
    WorkerTable,
)

log = logging.getLogger(__name__)

RUN_SECONDS_ENV = "SIM_RUN_SECONDS"
EXIT_CODE_ENV = "SIM_EXIT_CODE"
DEFAULT_RUN_SECONDS = 1.0
MAX_RUN_SECONDS = 7 * 86_400.0


def run_seconds(env: Mapping[str, str]) -> float:
    """How long a simulated worker runs (pure): the job's SIM_RUN_SECONDS, bounded."""
    raw = env.get(RUN_SECONDS_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_RUN_SECONDS
    except ValueError:
        raise LaunchError(f"{RUN_SECONDS_ENV} must be a number of seconds, got {raw!r}") from None
    if not 0 <= value <= MAX_RUN_SECONDS:
        raise LaunchError(f"{RUN_SECONDS_ENV} must be between 0 and {MAX_RUN_SECONDS:g}")
    return value


def exit_code(env: Mapping[str, str]) -> int:
    raw = env.get(EXIT_CODE_ENV, "0") or "0"
    try:
        code = int(raw)
    except ValueError:
        raise LaunchError(f"{EXIT_CODE_ENV} must be an integer, got {raw!r}") from None
    if not 0 <= code <= 255:
        raise LaunchError(f"{EXIT_CODE_ENV} must be between 0 and 255")
    return code


class _Simulated(Worker):
    timer: threading.Timer | None = None
    ends_at: float = 0.0

    @property
    def handle(self) -> str:
        return f"simulated:{self.pod_id}"


class SimulatedRuntime(WorkerTable):
    name = "simulated"
    join_timeout = 0.0

    def __init__(
        self, on_line: LineSink, on_exit: ExitSink, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(on_line, on_exit)
        self._clock = clock

    def launch(self, spec: LaunchSpec) -> None:
        seconds = run_seconds(spec.env)
        code = exit_code(spec.env)
        worker = _Simulated(
            pod_id=spec.pod_id,
            attempt=spec.attempt,
            gpu_indices=spec.gpu_indices,
            gpu_uuids=spec.gpu_uuids,
            lines=SourceLines(spec.pod_id, self._on_line),
        )
        worker.ends_at = self._clock() + seconds
        self._add(worker)
        worker.lines(f"simulated worker: rank {spec.rank}/{spec.world_size}, {seconds:g} s")
        worker.timer = threading.Timer(seconds, self._end, args=(worker, code))
        worker.timer.daemon = True
        worker.timer.start()

    def _end(self, worker: _Simulated, code: int) -> None:
        with worker.lock:
            if worker.done.is_set():
                return
            worker.lines(f"simulated worker: done, exit {code}")
            self._finish(worker, code, "" if code == 0 else worker.lines.error_tail())

    def _signal(self, worker: Worker, sig: signal.Signals) -> None:
        # Called with worker.lock held (stop_with_grace): end it now, as 128 + signal.
        if worker.done.is_set():
            return
        timer = getattr(worker, "timer", None)
        if timer is not None:
            timer.cancel()
        worker.lines(f"simulated worker: {sig.name}")
        self._finish(worker, 128 + int(sig), "")

    def adopt(self, skip: Mapping[int, int], prepare=None) -> dict[int, int]:
        return {}  # nothing survives the agent

    def kill_leftovers(self, markers: set[str]) -> int:
        return 0
