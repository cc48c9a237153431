"""The cycle's own row types (docs/scheduling.md): what `load_snapshot` reads besides the
pure `Snapshot`, and what `run_cycle` reports. Plain frozen dataclasses, no Django: the
scheduler owns them, and `jobs.actions.scheduling` (the writes) imports them from here."""

from dataclasses import asdict, dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class WaitingRow:
    """What the writes need of a waiting job beyond its JobSnap."""

    id: int
    status: str
    attempt: int
    status_reason: str
    queue_position: int | None
    gpus_per_worker: int
    cpus_per_worker: int
    memory_gb_per_worker: int
    updated_at: datetime | None = None  # the row's last write (reasons refreshed: apply_plan)


@dataclass(frozen=True, slots=True)
class CycleResult:
    admitted: tuple[int, ...] = ()
    pods_created: int = 0
    newly_queued: tuple[int, ...] = ()  # Pending → Inqueue
    waiting: int = 0  # jobs left waiting after this cycle
    reasons_updated: int = 0  # Inqueue jobs whose reason or position changed
    conflicts: tuple[int, ...] = ()  # jobs another writer moved first
    preempted: tuple[int, ...] = ()  # victims whose graceful preemption was requested
    charged_home: tuple[int, ...] = ()  # Acceptable borrowers now charged in their quota

    def as_dict(self) -> dict:
        return asdict(self)
