#!/usr/bin/env python3
"""Runs inside a job: which GPUs does CUDA give this process? Asked through the CUDA driver
API (libcuda via ctypes: cuInit, cuDeviceGetCount, cuDeviceGetUuid), which honours
CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER exactly as a training job's framework would;
`nvidia-smi -L` ignores both and says nothing about what the job sees.

    gpu_probe.py --expect GPU-…[,GPU-…] [--hold-mib N --until FILE --max-seconds S]

Prints one JSON line: {"visible": [UUIDs in CUDA's order], "expect": [...], "ok": bool}.
With --hold-mib it then allocates N MiB on each visible GPU and keeps the GPU busy (memset
in a loop) until FILE exists or S seconds have passed, so that the node's NVML samples show
the memory and the utilization. Exit 0: exactly the expected GPUs; 3: others; 4: CUDA failed.

Standard library only (it runs in whatever Python the job has). GPU_PROBE_DRIVER=module:func
supplies a stand-in driver instead of libcuda (tests.gpus.fakecuda, for the dry run).
"""

import argparse
import ctypes
import importlib
import json
import os
import sys
import time
import uuid
from ctypes import POINTER, byref, c_int, c_size_t, c_ubyte, c_uint, c_uint64, c_void_p

CUuuid = c_ubyte * 16
SIGNATURES = {
    "cuInit": [c_uint],
    "cuDeviceGetCount": [POINTER(c_int)],
    "cuDeviceGet": [POINTER(c_int), c_int],
    "cuDeviceGetUuid": [POINTER(CUuuid), c_int],
    "cuDevicePrimaryCtxRetain": [POINTER(c_void_p), c_int],
    "cuCtxSetCurrent": [c_void_p],
    "cuMemAlloc_v2": [POINTER(c_uint64), c_size_t],
    "cuMemsetD8_v2": [c_uint64, c_ubyte, c_size_t],
    "cuCtxSynchronize": [],
    "cuMemFree_v2": [c_uint64],
}


class CudaError(Exception):
    pass


def load_driver():
    stand_in = os.environ.get("GPU_PROBE_DRIVER")
    if stand_in:
        module, _, factory = stand_in.partition(":")
        return getattr(importlib.import_module(module), factory)()
    return ctypes.CDLL("libcuda.so.1")


class Cuda:
    def __init__(self, lib) -> None:
        self.lib = lib
        for name, args in SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, c_int

    def call(self, name: str, *args) -> None:
        result = getattr(self.lib, name)(*args)
        if result != 0:
            raise CudaError(f"{name} failed: CUresult {result}")

    def visible(self) -> list[str]:
        """The UUID of every device CUDA enumerates for this process, in CUDA's order."""
        self.call("cuInit", 0)
        count = c_int()
        self.call("cuDeviceGetCount", byref(count))
        found = []
        for ordinal in range(count.value):
            device, raw = c_int(), CUuuid()
            self.call("cuDeviceGet", byref(device), ordinal)
            self.call("cuDeviceGetUuid", byref(raw), device)
            found.append(f"GPU-{uuid.UUID(bytes=bytes(raw))}")
        return found

    def hold(self, ordinals: int, mib: int, until: str, max_seconds: float) -> None:
        """Allocate `mib` on each device and keep it busy until `until` exists."""
        size = mib * 1024 * 1024
        held = []
        for ordinal in range(ordinals):
            device, context, pointer = c_int(), c_void_p(), c_uint64()
            self.call("cuDeviceGet", byref(device), ordinal)
            self.call("cuDevicePrimaryCtxRetain", byref(context), device)
            self.call("cuCtxSetCurrent", context)
            self.call("cuMemAlloc_v2", byref(pointer), size)
            held.append((context, pointer))
        print(f"holding {mib} MiB on {ordinals} GPU(s)", flush=True)
        deadline = time.monotonic() + max_seconds
        step = 0
        while time.monotonic() < deadline and not (until and os.path.exists(until)):
            for context, pointer in held:
                self.call("cuCtxSetCurrent", context)
                self.call("cuMemsetD8_v2", pointer, step & 0xFF, size)
                self.call("cuCtxSynchronize")
            step += 1
        for context, pointer in held:
            self.call("cuCtxSetCurrent", context)
            self.call("cuMemFree_v2", pointer)
        print("released", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--expect", default="", help="comma-separated UUIDs this job must see")
    p.add_argument("--hold-mib", type=int, default=0)
    p.add_argument("--until", default="", help="hold until this file exists")
    p.add_argument("--max-seconds", type=float, default=240.0)
    args = p.parse_args(argv)
    expect = [u for u in args.expect.split(",") if u]
    try:
        cuda = Cuda(load_driver())
        visible = cuda.visible()
    except (OSError, AttributeError, CudaError) as exc:
        print(json.dumps({"error": f"CUDA driver API: {exc}"}), flush=True)
        return 4
    ok = visible == expect
    env = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    print(json.dumps({"visible": visible, "expect": expect, "ok": ok, "env": env}), flush=True)
    if not ok:
        return 3
    if args.hold_mib and visible:
        try:
            cuda.hold(len(visible), args.hold_mib, args.until, args.max_seconds)
        except CudaError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
            return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
