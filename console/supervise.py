"""The embedded agent's supervision (`manage.py run_console`): a local agent that exits
while the console runs (killed, crashed) is started again after an exponential back-off
(1 s, 2 s, 4 s … at most 60 s), and the count starts over once a run has lasted a minute.
After `MAX_RESTARTS` quick failures in a row it is left stopped, loudly: the node then goes
NotReady and every page says so (`console.context_processors.node_banner`).
docs/processes.md ("The embedded agent").
"""

import logging
import subprocess
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

BASE_DELAY = 1.0  # seconds before the first restart
MAX_DELAY = 60.0
MAX_RESTARTS = 10  # quick failures in a row before giving up
STABLE_AFTER = 60.0  # a run this long resets the count


def restart_delay(failures: int, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> float:
    """Seconds to wait before restart number `failures` (1, 2, …) in a row (pure)."""
    return min(cap, base * 2 ** max(failures - 1, 0))


class Supervisor:
    """Keeps one child process running: `start()` makes it; `stop()` ends the supervision
    (the caller then stops `process` its own way)."""

    def __init__(
        self,
        start: Callable[[], subprocess.Popen],
        *,
        name: str = "local agent",
        base: float = BASE_DELAY,
        cap: float = MAX_DELAY,
        max_restarts: int = MAX_RESTARTS,
        stable_after: float = STABLE_AFTER,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self._start = start
        self.name = name
        self.base, self.cap = base, cap
        self.max_restarts, self.stable_after = max_restarts, stable_after
        self.report = report or log.warning
        self.restarts = 0
        self.gave_up = False
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self.process = start()
        self._thread = threading.Thread(target=self._watch, name=f"{name} supervisor")
        self._thread.daemon = True
        self._thread.start()

    def _watch(self) -> None:
        failures = 0
        while True:
            started = time.monotonic()
            code = self.process.wait()
            if self._halt.is_set():
                return
            failures = 1 if time.monotonic() - started >= self.stable_after else failures + 1
            if failures > self.max_restarts:
                self.gave_up = True
                self.report(
                    f"{self.name} exited with {code}; {self.max_restarts} restarts in a row "
                    "failed: left stopped (the node goes NotReady)"
                )
                return
            delay = restart_delay(failures, self.base, self.cap)
            self.report(f"{self.name} exited with {code}; starting it again in {delay:g} s")
            if self._halt.wait(delay):
                return
            with self._lock:
                if self._halt.is_set():
                    return
                self.process = self._start()
                self.restarts += 1

    def stop(self) -> subprocess.Popen:
        """No more restarts; the process now running (or last run), to stop."""
        with self._lock:
            self._halt.set()
            return self.process

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
