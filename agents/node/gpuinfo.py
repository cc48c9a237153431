"""What the agent knows about one GPU, whatever it came from (NVML or fake devices)."""

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class MigInfo:
    uuid: str
    name: str
    memory_total_mb: int = 0
    memory_used_mb: int = 0


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total_mb: int
    memory_used_mb: int = 0
    utilization: int | None = 0  # None: unknown (MIG mode, or NVML could not read it)
    temperature: int | None = None
    power_watts: float | None = None
    ecc_errors: int = 0
    healthy: bool = True
    health_reason: str = ""
    health_mark: int = 0  # id of an Xid mark an operator may clear (agents.node.gpuhealth)
    pci_bus_id: str = ""
    mig_enabled: bool = False
    mig_instances: tuple[MigInfo, ...] = ()

    def as_report(self) -> dict:
        return asdict(self)


def worker_gpu_usage(assigned: Iterable[str | int], devices: Sequence[GpuInfo]) -> dict | None:
    """A worker's GPU use from its assigned devices' last sample (pure); devices are named by
    UUID (or, for workers launched before UUIDs, by index). None when it has no GPU or none
    of them was sampled; utilization None when no assigned device's is known."""
    wanted = set(assigned)
    mine = [d for d in devices if (d.uuid and d.uuid in wanted) or d.index in wanted]
    if not mine:
        return None
    known = [d.utilization for d in mine if d.utilization is not None]
    return {
        "gpus": len(mine),
        "utilization": round(sum(known) / len(known)) if known else None,
        "memory_used_mb": sum(d.memory_used_mb for d in mine),
    }
