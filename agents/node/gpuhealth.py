"""GPU health from NVML events (as NVIDIA's device plugin does): a critical Xid or a
double-bit ECC error marks the device unhealthy; the console then stops placing work on it.

Xids that a faulty *application* causes (13 graphics engine exception, 31 MMU fault, 43 GPU
stopped processing, 45 preemptive cleanup, 68 video processor exception, 109 context switch
timeout) say nothing about the device and are ignored.

A mark stays until an operator clears it in the console's admin (after resetting or checking
the GPU) or the agent restarts. Each mark has an id (when it was set, in ms), and a clear
names the id it saw: a newer event on the same GPU is never cleared by an older decision.

When waiting for events fails, watching is not given up: the event set is created again
with a growing delay (capped), and while the failures persist every watched device is
reported unhealthy ("health unknown") rather than silently unwatched. That mark goes away by
itself once events can be waited for again.
"""

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
DOUBLE_BIT_ECC = 0x2  # nvmlEventTypeDoubleBitEccError
WATCHED = XID_CRITICAL | DOUBLE_BIT_ECC
WAIT_MS = 5000
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
RETRY_BASE_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
FAILURES_BEFORE_UNHEALTHY = 3  # one transient error does not take a node's GPUs away


def judge_event(event_type: int, event_data: int) -> str | None:
    """Why an NVML event makes a device unhealthy, or None when it does not (pure)."""
    if event_type & DOUBLE_BIT_ECC:
        return "double-bit ECC error"
    if event_type & XID_CRITICAL:
        if event_data in APPLICATION_XIDS:
            return None
        return f"critical Xid {event_data}"
    return None


def retry_delay(failures: int, base: float = RETRY_BASE_SECONDS, cap: float = RETRY_MAX_SECONDS):
    """Seconds to wait after the n-th failure in a row: doubling from `base`, at most `cap`
    (pure): a broken NVML is retried at a bounded rate, forever, never in a busy loop."""
    if failures <= 0:
        return 0.0
    return min(cap, base * 2 ** min(failures - 1, 62))


@dataclass(frozen=True)
class Mark:
    reason: str
    mark_id: int  # 0: not an operator's to clear (watching failed; clears by itself)


class HealthWatcher:
    """Waits for NVML events in a thread. `snapshot()` maps a GPU UUID to its Mark."""

    def __init__(
        self, nvml, uuids: Sequence[str], *, clock: Callable[[], float] = time.time
    ) -> None:
        self._nvml = nvml
        self._uuids = [u for u in uuids if u]
        self._clock = clock
        self._marks: dict[str, Mark] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._set = None
        self.watched: list[str] = []
        self.failures = 0
        self.problem = ""  # why watching fails, once it has failed often enough
        self.unsupported = False
        self._last_id = 0
        self._sleep = self._stop.wait  # between retries; returns early on close()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)

    # --- what the agent calls ---------------------------------------------------------
    def start(self) -> "HealthWatcher":
        try:
            self._open()
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == NVML_ERROR_NOT_SUPPORTED:
                log.warning("NVML events are not supported here: no Xid health checks")
                self.unsupported = True
                return self
            self._failed(exc, wait=False)
        if self._set is None or self.watched:
            self._thread.start()
        return self

    def snapshot(self) -> dict[str, Mark]:
        with self._lock:
            marks = dict(self._marks)
            problem = self.problem
        if problem:
            unknown = Mark(f"GPU health unknown: NVML event watching fails ({problem})", 0)
            for uuid in self.watched or self._uuids:
                marks.setdefault(uuid, unknown)
        return {u: Mark(m.reason[:200], m.mark_id) for u, m in marks.items()}

    def clear(self, uuid: str, mark_id: int) -> bool:
        """An operator cleared mark `mark_id` of this GPU: drop it unless a newer one has
        replaced it since. Returns whether a mark was dropped."""
        with self._lock:
            mark = self._marks.get(uuid)
            if mark is None or mark.mark_id > mark_id:
                return False
            del self._marks[uuid]
        log.warning("GPU %s: health mark cleared by an operator (%s)", uuid, mark.reason)
        return True

    def handle(self, event) -> None:
        reason = judge_event(int(event.eventType), int(event.eventData))
        if reason is None:
            log.info("GPU event ignored (type %#x data %s)", event.eventType, event.eventData)
            return
        try:
            uuid = self._nvml.nvmlDeviceGetUUID(event.device)
            targets = [uuid.decode() if isinstance(uuid, bytes) else str(uuid)]
        except self._nvml.NVMLError:
            targets = list(self.watched or self._uuids)  # the event names no device: all
        with self._lock:
            mark_id = self._next_id()
            for uuid in targets:
                before = self._marks.get(uuid)
                self._marks[uuid] = Mark(reason, mark_id)  # the newest event wins
                if before is None or before.reason != reason:
                    log.error("GPU %s is unhealthy: %s", uuid, reason)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WAIT_MS / 1000 + 1)
        self._drop_set()

    # --- the watching thread ----------------------------------------------------------
    def _next_id(self) -> int:
        self._last_id = max(int(self._clock() * 1000), self._last_id + 1)
        return self._last_id

    def _open(self) -> None:
        """Create the event set and register every device that supports a watched event
        (devices that support none are simply not watched)."""
        nvml = self._nvml
        event_set = nvml.nvmlEventSetCreate()
        watched = []
        for uuid in self._uuids:
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle) & WATCHED
                if supported:
                    nvml.nvmlDeviceRegisterEvents(handle, supported, event_set)
                    watched.append(uuid)
            except nvml.NVMLError as exc:
                log.warning("GPU %s: cannot watch NVML events: %s", uuid, exc)
        self._set, self.watched = event_set, watched

    def _drop_set(self) -> None:
        event_set, self._set = self._set, None
        if event_set is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlEventSetFree(event_set)

    def _failed(self, exc: Exception, *, wait: bool = True) -> None:
        self.failures += 1
        if self.failures >= FAILURES_BEFORE_UNHEALTHY:
            with self._lock:
                if not self.problem:
                    log.error("NVML event watching keeps failing (%s): GPUs unhealthy", exc)
                self.problem = str(exc)[:120] or type(exc).__name__
        else:
            log.warning("NVML event watching failed (%s); trying again", exc)
        if wait:
            self._sleep(retry_delay(self.failures, RETRY_BASE_SECONDS, RETRY_MAX_SECONDS))

    def _ok(self) -> None:
        if self.failures:
            log.info("NVML event watching works again")
            with self._lock:
                self.problem = ""
            self.failures = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._set is None:
                try:
                    self._open()
                except self._nvml.NVMLError as exc:
                    self._failed(exc)
                    continue
                if not self.watched:
                    self._ok()
                    return
            try:
                event = self._nvml.nvmlEventSetWait(self._set, WAIT_MS)
            except self._nvml.NVMLError as exc:
                if getattr(exc, "value", None) == NVML_ERROR_TIMEOUT:
                    self._ok()
                    continue
                self._drop_set()
                self._failed(exc)
                continue
            self._ok()
            self.handle(event)
