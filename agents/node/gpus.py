"""GPU discovery: NVML (nvidia-ml-py) on real nodes, fake devices for the embedded default.

Both produce the same `GpuInfo`, so the rest of the agent cannot tell them apart.
"""

import contextlib
import hashlib
import logging
import re
from dataclasses import asdict, dataclass, replace

from agents.node.gpuhealth import HealthWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total_mb: int
    memory_used_mb: int = 0
    utilization: int = 0
    temperature: int | None = None
    power_watts: float | None = None
    ecc_errors: int = 0
    healthy: bool = True
    health_reason: str = ""

    def as_report(self) -> dict:
        return asdict(self)


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


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_init(nvml) -> bool:
    """Initialise NVML once; False when it is not available (no driver, no library)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        log.info("NVML not available: %s", exc)
        return False
    return True


def read_nvml(nvml) -> list[GpuInfo]:
    """Every device NVML sees. A device NVML can no longer open (fallen off the bus) is
    reported unhealthy rather than silently dropped."""
    devices = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            devices.append(_read_device(nvml, index))
        except nvml.NVMLError as exc:
            devices.append(
                GpuInfo(
                    index=index,
                    uuid="",
                    name="",
                    memory_total_mb=0,
                    healthy=False,
                    health_reason=f"NVML error: {exc}"[:200],
                )
            )
    return devices


def _read_device(nvml, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def read(fn, *args, default=None):
        try:
            return fn(handle, *args)
        except nvml.NVMLError:
            return default

    memory = read(nvml.nvmlDeviceGetMemoryInfo)
    util = read(nvml.nvmlDeviceGetUtilizationRates)
    power_mw = read(nvml.nvmlDeviceGetPowerUsage)
    ecc = read(
        nvml.nvmlDeviceGetTotalEccErrors,
        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        nvml.NVML_VOLATILE_ECC,
        default=0,
    )
    healthy, reason = True, ""
    if ecc:
        healthy, reason = False, f"{ecc} uncorrectable ECC errors since boot"
    elif memory is None:
        healthy, reason = False, "NVML cannot read device memory"
    return GpuInfo(
        index=index,
        uuid=_text(read(nvml.nvmlDeviceGetUUID, default="")),
        name=_text(read(nvml.nvmlDeviceGetName, default="")),
        memory_total_mb=int(memory.total // (1024 * 1024)) if memory else 0,
        memory_used_mb=int(memory.used // (1024 * 1024)) if memory else 0,
        utilization=int(util.gpu) if util else 0,
        temperature=read(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
        power_watts=round(power_mw / 1000, 1) if power_mw is not None else None,
        ecc_errors=int(ecc or 0),
        healthy=healthy,
        health_reason=reason,
    )


class GpuSource:
    """Where the agent's GPU facts come from: fake devices when asked for, else NVML."""

    def __init__(self, fake_spec: str | None, node_name: str, nvml=None) -> None:
        if nvml is None:
            import pynvml as nvml
        self._nvml = nvml
        self._nvml_ok = nvml_init(nvml)
        self.fake = fake_spec is not None
        self.health: HealthWatcher | None = None
        if self.fake:
            self._fakes = fake_gpus(fake_spec, node_name)
            self.gpu_type = parse_fake_spec(fake_spec)[1]
            if self._nvml_ok and nvml.nvmlDeviceGetCount():
                log.warning("--fake-gpus given: ignoring the real GPUs NVML found")
            return
        found = self.sample()
        if not self._nvml_ok:
            log.warning("NVML not available and no --fake-gpus given: reporting no GPUs")
        elif found:
            try:
                self.health = HealthWatcher(nvml, len(found)).start()
            except nvml.NVMLError as exc:
                log.warning("NVML events not available (%s): no Xid health checks", exc)
        self.gpu_type = gpu_type_from_name(found[0].name) if found else ""

    def sample(self) -> list[GpuInfo]:
        if self.fake:
            return list(self._fakes)
        if not self._nvml_ok:
            return []
        devices = read_nvml(self._nvml)
        marks = self.health.snapshot() if self.health is not None else {}
        return [
            replace(d, healthy=False, health_reason=marks[d.index][:200])
            if d.index in marks and d.healthy
            else d
            for d in devices
        ]

    def close(self) -> None:
        if self.health is not None:
            self.health.close()
            self.health = None
        if self._nvml_ok:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._nvml_ok = False


def worker_gpu_usage(indices, devices: list[GpuInfo]) -> dict | None:
    """A worker's GPU use from its assigned devices' last sample (pure); None when it has
    no GPU or none of them was sampled."""
    mine = [d for d in devices if d.index in set(indices)]
    if not mine:
        return None
    return {
        "gpus": len(mine),
        "utilization": round(sum(d.utilization for d in mine) / len(mine)),
        "memory_used_mb": sum(d.memory_used_mb for d in mine),
    }
