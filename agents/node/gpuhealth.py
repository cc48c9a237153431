"""GPU health from NVML events (as NVIDIA's device plugin does): a critical Xid or a
double-bit ECC error marks the device unhealthy until the agent restarts (a reset or reboot
by the operator is what brings it back); the console then stops placing work on it.

Xids that a faulty *application* causes (13 graphics engine exception, 31 MMU fault, 43 GPU
stopped processing, 45 preemptive cleanup, 68 video processor exception, 109 context switch
timeout) say nothing about the device and are ignored.
"""

import contextlib
import logging
import threading

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
DOUBLE_BIT_ECC = 0x2  # nvmlEventTypeDoubleBitEccError
WATCHED = XID_CRITICAL | DOUBLE_BIT_ECC
WAIT_MS = 5000
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_NOT_SUPPORTED = 3


def judge_event(event_type: int, event_data: int) -> str | None:
    """Why an NVML event makes a device unhealthy, or None when it does not (pure)."""
    if event_type & DOUBLE_BIT_ECC:
        return "double-bit ECC error"
    if event_type & XID_CRITICAL:
        if event_data in APPLICATION_XIDS:
            return None
        return f"critical Xid {event_data}"
    return None


class HealthWatcher:
    """Waits for NVML events in a thread; `marks` maps a device index to why it is
    unhealthy. Devices that support no watched event are simply not watched."""

    def __init__(self, nvml, count: int) -> None:
        self._nvml = nvml
        self.marks: dict[int, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._set = nvml.nvmlEventSetCreate()
        self.watched: list[int] = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle) & WATCHED
                if supported:
                    nvml.nvmlDeviceRegisterEvents(handle, supported, self._set)
                    self.watched.append(index)
            except nvml.NVMLError as exc:
                log.warning("GPU %s: cannot watch NVML events: %s", index, exc)
        self._count = count
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)

    def start(self) -> "HealthWatcher":
        if self.watched:
            self._thread.start()
        return self

    def snapshot(self) -> dict[int, str]:
        with self._lock:
            return dict(self.marks)

    def handle(self, event) -> None:
        reason = judge_event(int(event.eventType), int(event.eventData))
        if reason is None:
            log.info("GPU event ignored (type %#x data %s)", event.eventType, event.eventData)
            return
        try:
            indices = [self._nvml.nvmlDeviceGetIndex(event.device)]
        except self._nvml.NVMLError:
            indices = list(range(self._count))  # the event names no device: all of them
        with self._lock:
            for index in indices:
                if index not in self.marks:
                    log.error("GPU %s is unhealthy: %s", index, reason)
                    self.marks[index] = reason

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._nvml.nvmlEventSetWait(self._set, WAIT_MS)
            except self._nvml.NVMLError as exc:
                if getattr(exc, "value", None) == NVML_ERROR_TIMEOUT:
                    continue
                log.warning("NVML event wait failed (%s); no longer watching events", exc)
                return
            self.handle(event)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WAIT_MS / 1000 + 1)
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlEventSetFree(self._set)
