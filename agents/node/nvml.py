"""Reading GPUs through NVML (nvidia-ml-py), one field at a time.

A failing NVML call costs what it says and no more: a field it cannot read is unknown
(None), a device it cannot open is reported unhealthy with the error, and when NVML cannot
even count its devices the last known devices are reported unhealthy with that reason. The
heartbeat always goes out (docs/agent-protocol.md: one bad item never fails the batch).

MIG: a GPU in MIG mode is reported as such with its MIG devices; its utilization is unknown
(NVML does not report it per GPU in MIG mode), never 0 %, so nothing mistakes it for idle.
"""

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agents.node.gpuinfo import GpuInfo, MigInfo
from protocol.agent import MAX_MIG_INSTANCES

log = logging.getLogger(__name__)

MIB = 1024 * 1024
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_DEVICE_MIG_ENABLE = 1
# Errors of the versioned temperature call that mean "this driver or library predates it".
_TOO_OLD = {NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)


class NvmlReader:
    """Reads every device on each call to `read`; keeps the previous result so a device or
    a count that cannot be read is reported with its last known identity."""

    def __init__(self, nvml) -> None:
        self.nvml = nvml
        self.previous: list[GpuInfo] = []
        self._logged: dict[str, str] = {}  # what was last logged per subject (no log spam)

    def _note(self, subject: str, problem: str) -> None:
        """Log a problem when it starts or changes, not on every heartbeat."""
        if self._logged.get(subject, "") != problem:
            self._logged[subject] = problem
            if problem:
                log.warning("NVML: %s: %s", subject, problem)
            else:
                log.info("NVML: %s: readable again", subject)

    def read(self) -> list[GpuInfo]:
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
        except Exception as exc:  # NVMLError, or a library that cannot be used at all
            reason = f"NVML cannot count devices: {_short(exc)}"[:200]
            self._note("device count", reason)
            return [_unknown(d, reason) for d in self.previous]
        self._note("device count", "")
        before = {d.index: d for d in self.previous}
        devices = []
        for index in range(count):
            try:
                devices.append(self._read_device(index))
                self._note(f"GPU {index}", "")
            except Exception as exc:
                reason = f"NVML error: {_short(exc)}"[:200]
                self._note(f"GPU {index}", reason)
                known = before.get(index)
                devices.append(
                    _unknown(known, reason)
                    if known is not None
                    else GpuInfo(
                        index=index,
                        uuid="",
                        name="",
                        memory_total_mb=0,
                        utilization=None,
                        healthy=False,
                        health_reason=reason,
                    )
                )
        self.previous = devices
        return devices

    def _read_device(self, index: int) -> GpuInfo:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        failed: list[str] = []

        def read(fn_name: str, *args, default=None, target=handle):
            fn: Callable | None = getattr(nvml, fn_name, None)
            if fn is None:
                return default
            try:
                return fn(target, *args)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != NVML_ERROR_NOT_SUPPORTED:  # not a failure
                    failed.append(f"{fn_name}: {exc}")
                return default

        uuid = _text(read("nvmlDeviceGetUUID", default=""))
        mig_mode = read("nvmlDeviceGetMigMode")
        mig_enabled = bool(mig_mode) and mig_mode[0] == NVML_DEVICE_MIG_ENABLE
        instances = self._mig_instances(handle) if mig_enabled else ()
        memory = read("nvmlDeviceGetMemoryInfo")
        if memory is not None:
            total, used = int(memory.total // MIB), int(memory.used // MIB)
        elif mig_enabled and instances:  # the parent may not answer in MIG mode
            total = sum(i.memory_total_mb for i in instances)
            used = sum(i.memory_used_mb for i in instances)
        else:
            total = used = 0
        util = None if mig_enabled else read("nvmlDeviceGetUtilizationRates")
        power_mw = read("nvmlDeviceGetPowerUsage")
        ecc = read(
            "nvmlDeviceGetTotalEccErrors",
            getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
            getattr(nvml, "NVML_VOLATILE_ECC", 0),
            default=0,
        )
        pci = read("nvmlDeviceGetPciInfo")
        healthy, reason = True, ""
        if not uuid:
            healthy, reason = False, "NVML cannot read the GPU's UUID"
        elif ecc:
            healthy, reason = False, f"{ecc} uncorrectable ECC errors since boot"
        elif memory is None and not mig_enabled:
            healthy, reason = False, "NVML cannot read device memory"
        if failed:
            log.debug("GPU %s: unreadable fields: %s", index, "; ".join(failed))
        return GpuInfo(
            index=index,
            uuid=uuid[:100],
            name=_text(read("nvmlDeviceGetName", default=""))[:100],
            memory_total_mb=total,
            memory_used_mb=used,
            utilization=int(util.gpu) if util is not None else None,
            temperature=self._temperature(handle),
            power_watts=round(power_mw / 1000, 1) if power_mw is not None else None,
            ecc_errors=int(ecc or 0),
            healthy=healthy,
            health_reason=reason,
            pci_bus_id=_text(getattr(pci, "busId", ""))[:32] if pci is not None else "",
            mig_enabled=mig_enabled,
            mig_instances=instances,
        )

    def _temperature(self, handle) -> int | None:
        """The versioned call (nvmlDeviceGetTemperatureV); the deprecated one only where the
        driver or library predates it."""
        nvml = self.nvml
        sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        versioned = getattr(nvml, "nvmlDeviceGetTemperatureV", None)
        if versioned is not None:
            try:
                return int(versioned(handle, sensor))
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) not in _TOO_OLD:
                    return None
        legacy = getattr(nvml, "nvmlDeviceGetTemperature", None)
        if legacy is None:
            return None
        try:
            return int(legacy(handle, sensor))
        except nvml.NVMLError:
            return None

    def _mig_instances(self, handle) -> tuple[MigInfo, ...]:
        nvml = self.nvml
        try:
            slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        except nvml.NVMLError:
            return ()
        found = []
        for slot in range(slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError:
                continue  # NOT_FOUND: an empty slot
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(mig)
                total, used = int(memory.total // MIB), int(memory.used // MIB)
            except nvml.NVMLError:
                total = used = 0
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(mig))
                name = _text(nvml.nvmlDeviceGetName(mig))
            except nvml.NVMLError:
                uuid, name = "", ""
            found.append(MigInfo(uuid[:100], name[:100], total, used))
        return tuple(found[:MAX_MIG_INSTANCES])


def _unknown(device: GpuInfo, reason: str) -> GpuInfo:
    """A known device NVML cannot read now: same identity, live numbers unknown."""
    return replace(
        device,
        utilization=None,
        temperature=None,
        power_watts=None,
        healthy=False,
        health_reason=reason,
        health_mark=0,
    )
