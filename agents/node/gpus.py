"""GPU discovery: NVML (nvidia-ml-py) on real nodes, fake devices for the embedded default.

Both produce the same `GpuInfo`, so the rest of the agent cannot tell them apart. GPUs are
addressed by UUID (NVML's index order is not stable across reboots); `resolve` checks that a
worker's GPUs are still where the console placed them before it is launched.
"""

import contextlib
import hashlib
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from agents.node.gpuhealth import HealthWatcher
from agents.node.gpuinfo import GpuInfo, MigInfo, worker_gpu_usage
from agents.node.nvml import NvmlReader
from protocol import words

__all__ = [
    "GpuInfo",
    "GpuMismatch",
    "GpuSource",
    "GpuSpecError",
    "MigInfo",
    "fake_gpus",
    "gpu_type_from_name",
    "parse_fake_spec",
    "resolve",
    "worker_gpu_usage",
]

log = logging.getLogger(__name__)

# Memory as NVML reports it for common data-centre parts (MiB).
FAKE_MEMORY_MB = {
    "H200": 143771,
    "H100": 81559,
    "H800": 81559,
    "H20": 97871,
    "A100": 81920,
    "A800": 81920,
    "L40S": 46068,
    "V100": 32768,
}
_FAKE_SPEC = re.compile(r"^(?P<count>\d{1,2})x(?P<type>[A-Za-z0-9][A-Za-z0-9._-]{0,39})$")


class GpuSpecError(ValueError):
    pass


def parse_fake_spec(spec: str) -> tuple[int, str]:
    """'8xH200' → (8, 'H200')."""
    match = _FAKE_SPEC.match(spec.strip())
    if not match:
        raise GpuSpecError(f"expected COUNTxTYPE such as 8xH200, got {spec!r}")
    count = int(match["count"])
    if not 1 <= count <= 64:
        raise GpuSpecError(f"a node has 1 to 64 GPUs, got {count}")
    return count, match["type"]


def fake_gpus(spec: str, node_name: str) -> list[GpuInfo]:
    count, gpu_type = parse_fake_spec(spec)
    # Stable per node, distinct across nodes, so UUIDs look like real ones in the console.
    seed = hashlib.sha256(node_name.encode()).hexdigest()[:12]
    return [
        GpuInfo(
            index=i,
            uuid=f"GPU-fake-{seed}-{i:02d}",
            name=f"NVIDIA {gpu_type} (fake)",
            memory_total_mb=FAKE_MEMORY_MB.get(gpu_type.upper(), 81920),
            temperature=30,
            power_watts=70.0,
        )
        for i in range(count)
    ]


def gpu_type_from_name(name: str) -> str:
    """'NVIDIA H200' → 'H200'; 'NVIDIA A100-SXM4-80GB' → 'A100'; 'Tesla V100-SXM2-32GB' →
    'V100'; 'NVIDIA GeForce RTX 4090' → 'RTX4090'."""
    words = [w for w in re.split(r"\s+", name.replace("(fake)", "").strip()) if w]
    words = [w for w in words if w.upper() not in {"NVIDIA", "TESLA", "GEFORCE", "QUADRO"}]
    if not words:
        return ""
    if words[0].upper() == "RTX" and len(words) > 1:
        return ("RTX" + words[1].split("-")[0])[:40]
    return words[0].split("-")[0][:40]


def nvml_init(nvml) -> bool:
    """Initialise NVML once; False when it is not available (no driver, no library)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError, or a library that cannot be loaded at all
        log.info("NVML not available: %s", exc)
        return False
    return True


class GpuMismatch(Exception):
    """A worker's GPUs are not (or no longer) where the console placed it."""


def resolve(
    indices: Sequence[int], uuids: Sequence[str], devices: Sequence[GpuInfo]
) -> tuple[str, ...]:
    """The UUIDs a worker placed on GPUs `indices` gets (pure). With `uuids` from the
    console, each must still be at its index: after a reboot NVML may number the GPUs
    differently, and the console's bookkeeping is by index. Raises GpuMismatch."""
    by_index = {d.index: d for d in devices}
    where = {d.uuid: d.index for d in devices if d.uuid}
    found = []
    for n, index in enumerate(indices):
        device = by_index.get(index)
        if device is None:
            raise GpuMismatch(
                f"GPU {index} does not exist on this node ({words.gpus(len(devices))})"
            )
        wanted = uuids[n] if n < len(uuids) else ""
        if not device.uuid:
            raise GpuMismatch(f"GPU {index}: NVML cannot read its UUID")
        if wanted and device.uuid != wanted:
            if wanted in where:
                raise GpuMismatch(
                    f"GPU {wanted} is now GPU {where[wanted]}, not GPU {index} "
                    "(the GPU order changed since it was placed)"
                )
            raise GpuMismatch(f"GPU {wanted} (placed as GPU {index}) is not on this node")
        found.append(device.uuid)
    return tuple(found)


class GpuSource:
    """Where the agent's GPU facts come from: fake devices when asked for, else NVML.
    Nothing here raises into the agent: NVML failures degrade fields or devices
    (agents.node.nvml), never the heartbeat or the agent's start."""

    def __init__(self, fake_spec: str | None, node_name: str, nvml=None) -> None:
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as exc:
                log.warning("nvidia-ml-py is not installed (%s)", exc)
        self._nvml = nvml
        self._nvml_ok = nvml is not None and nvml_init(nvml)
        self._reader = NvmlReader(nvml) if self._nvml_ok else None
        self.fake = fake_spec is not None
        self.health: HealthWatcher | None = None
        self.last: list[GpuInfo] = []
        self._gpu_type = ""
        self._watching = False  # a HealthWatcher was started (or could not be)
        if self.fake:
            self._fakes = fake_gpus(fake_spec, node_name)
            self._gpu_type = parse_fake_spec(fake_spec)[1]
            if self._nvml_ok and self._reader.read():
                log.warning("--fake-gpus given: ignoring the real GPUs NVML found")
            return
        self.sample()  # starts watching Xid events once NVML has named the GPUs
        if not self._nvml_ok:
            log.warning("NVML not available and no --fake-gpus given: reporting no GPUs")

    def _watch(self, devices: list[GpuInfo]) -> None:
        uuids = [d.uuid for d in devices if d.uuid]
        if self._watching or not uuids:
            return
        self._watching = True
        try:
            self.health = HealthWatcher(self._nvml, uuids).start()
        except Exception as exc:
            log.warning("NVML events not available (%s): no Xid health checks", exc)

    @property
    def gpu_type(self) -> str:
        """The node's GPU type, from the first device NVML could name (fake: the spec's)."""
        if not self._gpu_type:
            named = [d.name for d in self.last if d.name]
            self._gpu_type = gpu_type_from_name(named[0]) if named else ""
        return self._gpu_type

    def sample(self) -> list[GpuInfo]:
        if self.fake:
            self.last = list(self._fakes)
            return self.last
        if self._reader is None:
            return []
        try:
            devices = self._reader.read()
        except Exception:  # a bug must cost the GPU facts of one heartbeat, not the heartbeat
            log.exception("reading the GPUs failed")
            devices = list(self.last)
        self._watch(devices)
        marks = self.health.snapshot() if self.health is not None else {}
        self.last = [_with_mark(d, marks.get(d.uuid)) for d in devices]
        return self.last

    def clear_marks(self, clears: Iterable[tuple[str, int]]) -> int:
        """Clear the health marks an operator cleared in the console; returns how many."""
        if self.health is None:
            return 0
        return sum(self.health.clear(uuid, mark) for uuid, mark in clears)

    def close(self) -> None:
        if self.health is not None:
            self.health.close()
            self.health = None
        if self._nvml_ok:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml_ok = False


def _with_mark(device: GpuInfo, mark) -> GpuInfo:
    if mark is None:
        return device
    if device.healthy:
        return replace(device, healthy=False, health_reason=mark.reason, health_mark=mark.mark_id)
    return replace(device, health_mark=mark.mark_id)  # unhealthy for its own reason too
