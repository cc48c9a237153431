"""A stand-in for libcuda's driver API (the calls scripts/gpu_probe.py makes), over the same
simulated machine as the stand-in NVML (tests.gpus.fakenvml.World).

What matters is that it enumerates devices the way CUDA does, because that is what decides
which GPU a job gets:

- order: CUDA_DEVICE_ORDER=PCI_BUS_ID numbers devices in PCI bus order (as NVML does); the
  default, FASTEST_FIRST, puts the fastest first, so on a mixed node index 0 is not NVML's
  GPU 0;
- CUDA_VISIBLE_DEVICES: unset → all; otherwise a comma list of indices (into that order) or
  UUIDs (`GPU-…`, a unique prefix is enough), read up to the first entry that names no device
  or repeats one; empty → none;
- GPUs in MIG mode are not whole devices (this stand-in lists no MIG devices).

The functions are real C-callable function pointers (ctypes.CFUNCTYPE), so the probe calls
them exactly as it calls libcuda, writing results through its pointers. Allocations and
memsets are written to the world's `usage_dir`, where the stand-in NVML reads memory used and
utilization, as the real NVML sees what CUDA processes hold.
"""

import ctypes
import json
import os
import time
import uuid as uuidlib
from collections.abc import Mapping
from ctypes import CFUNCTYPE, POINTER, c_int, c_size_t, c_ubyte, c_uint, c_uint64, c_void_p
from pathlib import Path

from tests.gpus.fakenvml import FakeGpu, World

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
BUSY_UTILIZATION = 97
CUuuid = c_ubyte * 16


def cuda_order(gpus: list[FakeGpu], environ: Mapping[str, str]) -> list[FakeGpu]:
    """Every whole GPU in the order CUDA numbers them (pure)."""
    whole = sorted((g for g in gpus if g.mig != "enabled"), key=lambda g: g.pci_bus_id)
    if environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") == "PCI_BUS_ID":
        return whole
    return sorted(whole, key=lambda g: -g.speed)  # stable: PCI order among equals


def cuda_visible(gpus: list[FakeGpu], environ: Mapping[str, str]) -> list[FakeGpu]:
    """The devices a CUDA process enumerates, in its ordinal order (pure)."""
    ordered = cuda_order(gpus, environ)
    if "CUDA_VISIBLE_DEVICES" not in environ:
        return ordered
    chosen: list[FakeGpu] = []
    for entry in environ["CUDA_VISIBLE_DEVICES"].split(","):
        entry = entry.strip()
        if entry.isdigit():
            match = [ordered[int(entry)]] if int(entry) < len(ordered) else []
        elif entry.startswith("GPU-"):
            match = [g for g in ordered if g.uuid.startswith(entry)]
        else:
            match = []
        if len(match) != 1 or match[0] in chosen:
            break  # CUDA stops at the first entry it cannot use
        chosen.append(match[0])
    return chosen


class FakeCuda:
    """Attributes named like libcuda's symbols, each a C function pointer."""

    def __init__(self, world: World, environ: Mapping[str, str] | None = None) -> None:
        self.world = world
        self.environ = dict(os.environ if environ is None else environ)
        self.devices: list[FakeGpu] | None = None  # after cuInit
        self.contexts: dict[int, int] = {}  # context handle → device ordinal
        self.current: int | None = None
        self.allocations: dict[int, tuple[int, int]] = {}  # pointer → (ordinal, bytes)
        self._next_pointer = 0x7F0000000000
        self._busy_written: dict[int, float] = {}
        proto = {
            "cuInit": (self._init, [c_uint]),
            "cuDeviceGetCount": (self._count, [POINTER(c_int)]),
            "cuDeviceGet": (self._get, [POINTER(c_int), c_int]),
            "cuDeviceGetUuid": (self._uuid, [POINTER(CUuuid), c_int]),
            "cuDevicePrimaryCtxRetain": (self._retain, [POINTER(c_void_p), c_int]),
            "cuCtxSetCurrent": (self._set_current, [c_void_p]),
            "cuMemAlloc_v2": (self._alloc, [POINTER(c_uint64), c_size_t]),
            "cuMemsetD8_v2": (self._memset, [c_uint64, c_ubyte, c_size_t]),
            "cuCtxSynchronize": (self._sync, []),
            "cuMemFree_v2": (self._free, [c_uint64]),
        }
        self._keep = []
        for name, (fn, args) in proto.items():
            pointer = CFUNCTYPE(c_int, *args)(fn)
            self._keep.append(pointer)
            setattr(self, name, pointer)

    # --- the driver API -----------------------------------------------------------------
    def _init(self, flags: int) -> int:
        self.devices = cuda_visible(self.world.gpus, self.environ)
        return CUDA_SUCCESS

    def _device(self, ordinal: int) -> FakeGpu | None:
        if self.devices is None or not 0 <= ordinal < len(self.devices):
            return None
        return self.devices[ordinal]

    def _count(self, out) -> int:
        if self.devices is None:
            return CUDA_ERROR_NOT_INITIALIZED
        out[0] = len(self.devices)
        return CUDA_SUCCESS

    def _get(self, out, ordinal: int) -> int:
        if self._device(ordinal) is None:
            return CUDA_ERROR_INVALID_DEVICE
        out[0] = ordinal
        return CUDA_SUCCESS

    def _uuid(self, out, ordinal: int) -> int:
        gpu = self._device(ordinal)
        if gpu is None:
            return CUDA_ERROR_INVALID_DEVICE
        raw = uuidlib.UUID(gpu.uuid.removeprefix("GPU-")).bytes
        ctypes.memmove(out, raw, 16)
        return CUDA_SUCCESS

    def _retain(self, out, ordinal: int) -> int:
        if self._device(ordinal) is None:
            return CUDA_ERROR_INVALID_DEVICE
        handle = 0x1000 + ordinal
        self.contexts[handle] = ordinal
        out[0] = handle
        return CUDA_SUCCESS

    def _set_current(self, context) -> int:
        if context not in self.contexts:
            return CUDA_ERROR_INVALID_VALUE
        self.current = self.contexts[context]
        return CUDA_SUCCESS

    def _alloc(self, out, size: int) -> int:
        if self.current is None:
            return CUDA_ERROR_INVALID_VALUE
        gpu = self.devices[self.current]
        if size > gpu.memory_total_mb * 1024 * 1024:
            return CUDA_ERROR_OUT_OF_MEMORY
        self._next_pointer += size + 4096
        self.allocations[self._next_pointer] = (self.current, size)
        self._record(self.current)
        out[0] = self._next_pointer
        return CUDA_SUCCESS

    def _memset(self, pointer: int, value: int, size: int) -> int:
        if pointer not in self.allocations:
            return CUDA_ERROR_INVALID_VALUE
        ordinal = self.allocations[pointer][0]
        if time.time() - self._busy_written.get(ordinal, 0) > 0.5:
            self._record(ordinal, busy=True)
        time.sleep(0.01)  # a memset takes time on a real GPU too
        return CUDA_SUCCESS

    def _sync(self) -> int:
        return CUDA_SUCCESS if self.current is not None else CUDA_ERROR_INVALID_VALUE

    def _free(self, pointer: int) -> int:
        if self.allocations.pop(pointer, None) is None:
            return CUDA_ERROR_INVALID_VALUE
        for ordinal in {o for o, _ in self.allocations.values()} | {self.current}:
            self._record(ordinal)
        return CUDA_SUCCESS

    # --- what NVML sees -------------------------------------------------------------
    def _record(self, ordinal: int, busy: bool = False) -> None:
        if not self.world.usage_dir:
            return
        gpu = self.devices[ordinal]
        held = sum(size for o, size in self.allocations.values() if o == ordinal)
        now = time.time()
        if busy:
            self._busy_written[ordinal] = now
        record = {
            "pid": os.getpid(),
            "memory_mb": held // (1024 * 1024),
            "utilization": BUSY_UTILIZATION,
            "busy_at": self._busy_written.get(ordinal, 0),
        }
        path = Path(self.world.usage_dir) / f"{gpu.uuid}.{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)


def driver() -> FakeCuda:
    """GPU_PROBE_DRIVER=tests.gpus.fakecuda:driver — the world from FAKE_NVML_WORLD."""
    return FakeCuda(World.load(os.environ["FAKE_NVML_WORLD"]))
