"""A stand-in for nvidia-ml-py's `pynvml` module, driving the real agent where no GPU is.

It implements every NVML call the agent makes, with pynvml's names, return shapes and
errors (`NVMLError(code)`, `.value`, the same message strings), on a simulated machine
(`World`): GPUs in PCI bus order, optionally enumerated in another order (as after a
reboot), MIG mode with MIG devices, Xid events, and any call made to fail, always or a
given number of times, for every device or one.

In a test: `FakeNvml(world)` is put in `sys.modules["pynvml"]`. In a subprocess (the agent
of scripts/gpu-smoke.sh --dry-run): `tests/gpus/standin/` on PYTHONPATH provides a
`pynvml` that loads the world from the JSON file named by FAKE_NVML_WORLD. What jobs do
with their GPUs (memory held, busy) comes from the stand-in CUDA driver
(tests.gpus.fakecuda) through files in the world's `usage_dir`.
"""

import json
import os
import queue
import threading
import time
import uuid as uuidlib
from collections import Counter, namedtuple
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999
_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypeXidCriticalError = 0x8
MIB = 1024 * 1024


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


Memory = namedtuple("Memory", "total free used")
Utilization = namedtuple("Utilization", "gpu memory")
PciInfo = namedtuple("PciInfo", "busId busIdLegacy domain bus device pciDeviceId")


def fake_uuid(seed: str) -> str:
    """A UUID as NVML prints them, stable for a seed: GPU-xxxxxxxx-xxxx-…"""
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, seed))


@dataclass
class FakeMig:
    uuid: str
    name: str
    memory_total_mb: int
    memory_used_mb: int = 0


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    pci_bus_id: str = "00000000:18:00.0"
    memory_total_mb: int = 143771
    memory_used_mb: int = 0
    utilization: int = 0
    temperature: int = 40
    power_mw: int = 98_765
    ecc_uncorrected: int = 0
    supported_events: int = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError
    speed: int = 90  # CUDA's default order puts the fastest first (tests.gpus.fakecuda)
    mig: str = "unsupported"  # unsupported | disabled | enabled
    mig_devices: list[FakeMig] = field(default_factory=list)


@dataclass
class World:
    """The simulated machine. `gpus` are in PCI bus order; `order` is how NVML enumerates
    them (positions into `gpus`; None: PCI order, as NVML does)."""

    gpus: list[FakeGpu]
    order: list[int] | None = None
    available: bool = True  # False: nvmlInit fails (no driver)
    # "call" or "call:uuid" → [error code, how many more times (None: always)]
    failures: dict[str, list] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)  # calls this pynvml does not have
    usage_dir: str = ""  # what the stand-in CUDA driver's processes hold (fakecuda)

    def fail(self, call: str, code: int = NVML_ERROR_UNKNOWN, *, uuid: str = "", times=None):
        self.failures[f"{call}:{uuid}" if uuid else call] = [code, times]

    def heal(self, call: str, *, uuid: str = "") -> None:
        self.failures.pop(f"{call}:{uuid}" if uuid else call, None)

    def enumerated(self) -> list[FakeGpu]:
        return [self.gpus[i] for i in (self.order or range(len(self.gpus)))]

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "World":
        data = json.loads(Path(path).read_text())
        gpus = []
        for g in data.pop("gpus"):
            migs = [FakeMig(**m) for m in g.pop("mig_devices", [])]
            gpus.append(FakeGpu(**g, mig_devices=migs))
        return cls(gpus=gpus, **data)

    # --- what jobs hold, written by the stand-in CUDA driver ---------------------------
    def held(self, gpu_uuid: str) -> tuple[int, int | None]:
        """(MiB held, utilization while busy) by live processes on this GPU."""
        if not self.usage_dir:
            return 0, None
        total, busy = 0, None
        for path in Path(self.usage_dir).glob(f"{gpu_uuid}.*.json"):
            try:
                record = json.loads(path.read_text())
                os.kill(int(record["pid"]), 0)
            except (OSError, ValueError, KeyError):
                continue  # gone: its memory is free again
            total += int(record.get("memory_mb", 0))
            if time.time() - float(record.get("busy_at", 0)) < 3:
                busy = max(busy or 0, int(record.get("utilization", 0)))
        return total, busy


@dataclass(frozen=True)
class _Handle:
    gpu: FakeGpu
    mig: FakeMig | None = None


class FakeNvml:
    """The `pynvml` module's surface, over a World. `calls` counts every call made."""

    NVMLError = NVMLError

    def __init__(self, world: World) -> None:
        self.world = world
        self.calls: Counter[str] = Counter()
        self.initialised = 0
        self.shutdowns = 0
        self.event_sets: list[queue.Queue] = []
        self.registered: dict[str, int] = {}  # uuid → event types registered
        self.freed = 0
        self._lock = threading.Lock()
        for name, value in globals().items():  # constants, as attributes like the module's
            if name.startswith(("NVML_", "nvmlEventType")):
                setattr(self, name, value)

    def __getattribute__(self, name: str):
        if name.startswith("nvml") and name in object.__getattribute__(self, "world").absent:
            raise AttributeError(name)  # an older nvidia-ml-py without this function
        return object.__getattribute__(self, name)

    # --- plumbing ---------------------------------------------------------------------
    def _call(self, name: str, handle: _Handle | None = None) -> None:
        with self._lock:
            self.calls[name] += 1
            keys = [name]
            if handle is not None:
                keys.insert(0, f"{name}:{(handle.mig or handle.gpu).uuid}")
                if handle.mig is not None:
                    keys.insert(1, f"{name}:{handle.gpu.uuid}")
            for key in keys:
                rule = self.world.failures.get(key)
                if rule is None:
                    continue
                code, times = rule
                if times is not None:
                    if times <= 0:
                        continue
                    rule[1] = times - 1
                raise NVMLError(code)
        if name != "nvmlInit" and not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    # --- init ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if not self.world.available:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self._call("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.shutdowns += 1
        self.initialised = max(0, self.initialised - 1)

    # --- devices ----------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.world.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        gpus = self.world.enumerated()
        if not 0 <= index < len(gpus):
            self._call("nvmlDeviceGetHandleByIndex")
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        handle = _Handle(gpus[index])
        self._call("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid) -> _Handle:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.world.gpus:
            if gpu.uuid == text:
                handle = _Handle(gpu)
                self._call("nvmlDeviceGetHandleByUUID", handle)
                return handle
        self._call("nvmlDeviceGetHandleByUUID")
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        self._call("nvmlDeviceGetIndex", handle)
        return self.world.enumerated().index(handle.gpu)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        if handle is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        self._call("nvmlDeviceGetUUID", handle)
        return (handle.mig or handle.gpu).uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        self._call("nvmlDeviceGetName", handle)
        return handle.mig.name if handle.mig else handle.gpu.name

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> PciInfo:
        self._call("nvmlDeviceGetPciInfo", handle)
        bus = handle.gpu.pci_bus_id
        return PciInfo(bus.encode(), bus[4:].encode(), 0, int(bus.split(":")[1], 16), 0, 0x233510DE)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Memory:
        self._call("nvmlDeviceGetMemoryInfo", handle)
        if handle.mig is not None:
            m = handle.mig
            return Memory(
                m.memory_total_mb * MIB,
                (m.memory_total_mb - m.memory_used_mb) * MIB,
                m.memory_used_mb * MIB,
            )
        gpu = handle.gpu
        if gpu.mig == "enabled":
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # as the issue saw on MIG parents
        used = min(gpu.memory_total_mb, gpu.memory_used_mb + self.world.held(gpu.uuid)[0])
        return Memory(gpu.memory_total_mb * MIB, (gpu.memory_total_mb - used) * MIB, used * MIB)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Utilization:
        self._call("nvmlDeviceGetUtilizationRates", handle)
        if handle.mig is not None or handle.gpu.mig == "enabled":
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        busy = self.world.held(handle.gpu.uuid)[1]
        return Utilization(busy if busy is not None else handle.gpu.utilization, 0)

    def nvmlDeviceGetTemperatureV(self, handle: _Handle, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperatureV", handle)
        return handle.gpu.temperature

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        """Deprecated (removed in CUDA 14); kept only as the fallback."""
        self._call("nvmlDeviceGetTemperature", handle)
        return handle.gpu.temperature

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        self._call("nvmlDeviceGetPowerUsage", handle)
        return handle.gpu.power_mw

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:
        self._call("nvmlDeviceGetTotalEccErrors", handle)
        return handle.gpu.ecc_uncorrected

    # --- MIG --------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        self._call("nvmlDeviceGetMigMode", handle)
        if handle.gpu.mig == "unsupported":
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = NVML_DEVICE_MIG_ENABLE if handle.gpu.mig == "enabled" else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        self._call("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7 if handle.gpu.mig != "unsupported" else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if handle.gpu.mig != "enabled" or index >= len(handle.gpu.mig_devices):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return _Handle(handle.gpu, handle.gpu.mig_devices[index])

    # --- events -----------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> queue.Queue:
        self._call("nvmlEventSetCreate")
        event_set: queue.Queue = queue.Queue()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:
        self._call("nvmlDeviceGetSupportedEventTypes", handle)
        return handle.gpu.supported_events

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types: int, event_set) -> None:
        self._call("nvmlDeviceRegisterEvents", handle)
        self.registered[handle.gpu.uuid] = types

    def nvmlEventSetWait(self, event_set: queue.Queue, timeout_ms: int):
        self._call("nvmlEventSetWait")
        try:
            gpu_uuid, kind, data = event_set.get(timeout=min(timeout_ms, 50) / 1000)
        except queue.Empty:
            raise NVMLError(NVML_ERROR_TIMEOUT) from None
        gpu = next((g for g in self.world.gpus if g.uuid == gpu_uuid), None)
        return SimpleNamespace(
            device=_Handle(gpu) if gpu is not None else None,
            eventType=kind,
            eventData=data,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )

    def nvmlEventSetFree(self, event_set) -> None:
        self._call("nvmlEventSetFree")
        self.freed += 1

    def emit(self, gpu_uuid: str | None, kind: int, data: int = 0) -> None:
        """An event as the driver would raise it (None: one that names no device)."""
        if not self.event_sets:
            raise AssertionError("no event set was created")
        self.event_sets[-1].put((gpu_uuid, kind, data))


def world_of(count: int, *, name: str = "NVIDIA H200", seed: str = "n1", **overrides) -> World:
    """`count` GPUs of one kind on PCI buses 0x18, 0x2a, …"""
    buses = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
    return World(
        gpus=[
            FakeGpu(
                uuid=fake_uuid(f"{seed}-{i}"),
                name=name,
                pci_bus_id=f"00000000:{buses[i % 8] + i // 8:02X}:00.0",
                **overrides,
            )
            for i in range(count)
        ]
    )


def from_env() -> FakeNvml:
    """The stand-in for a subprocess: the world in the JSON file FAKE_NVML_WORLD names."""
    return FakeNvml(World.load(os.environ["FAKE_NVML_WORLD"]))
