"""The Philly trace (`--trace`, docs/simulator.md) as a scenario: a real workload for what-ifs.

One Lingjun tenant; one quota per virtual cluster sized from philly_vc.csv (nodes x 8 GPUs);
that many 8-GPU H200 nodes; jobs in submit order with time 0 at the first one, workers of at
most 8 GPUs (ceil(GPUs / 8) workers, GPUs spread evenly), the trace's duration as work.
Jobs of the four VCs missing from the table are dropped. Jobs larger than their VC can never
run in quota, so they are submitted with `Only Idle Resources` (borrowing the tenant's unused
quota); `idle_fraction` turns every k-th other job into an idle one too (`idle_mode`:
Only Idle Resources or Acceptable), optionally with checkpoints and fault tolerance.
`scale` sizes every VC (and so the cluster) by a factor; `offered_load` says how busy.
"""

import csv
import math
from datetime import datetime
from pathlib import Path

from simulator.scenario import ScenarioError

GPUS_PER_NODE = 8


def _rows(trace: Path) -> list[tuple[datetime, float, int, str]]:
    try:
        with trace.open(newline="") as handle:
            reader = csv.DictReader(handle)
            rows = []
            for line, row in enumerate(reader, start=2):
                if not row or not row.get("timestamp"):
                    continue
                try:
                    rows.append(
                        (
                            datetime.fromisoformat(row["timestamp"]),
                            float(row["duration"]),
                            int(float(row["num_gpus"])),
                            row["cluster"],
                        )
                    )
                except (KeyError, ValueError) as exc:
                    raise ScenarioError(f"trace line {line}: {exc}") from None
    except OSError as exc:
        raise ScenarioError(f"trace: cannot read {trace}: {exc.strerror}") from None
    rows.sort(key=lambda r: r[0])
    return rows


def _vcs(vc_file: Path) -> dict[str, int]:
    try:
        with vc_file.open(newline="") as handle:
            return {row["vc"]: int(row["node num"]) for row in csv.DictReader(handle)}
    except (OSError, KeyError, ValueError) as exc:
        raise ScenarioError(f"vc table {vc_file}: {exc}") from None


def philly_scenario(
    trace: Path,
    vc_file: Path,
    *,
    limit: int | None = None,
    skip: int = 0,
    idle_fraction: float = 0.0,
    scale: float = 1.0,
    idle_mode: str = "Only Idle Resources",
    checkpoint_every: float = 0,
    fault_tolerance: bool = False,
) -> dict:
    if not 0 <= idle_fraction <= 1:
        raise ScenarioError(f"--idle-fraction: must be between 0 and 1, got {idle_fraction}")
    if not 0 < scale <= 100:
        raise ScenarioError(f"--scale: must be above 0 and at most 100, got {scale}")
    # philly_vc.csv sizes the whole cluster (about 7.5x what philly.csv needs): --scale
    # shrinks (or grows) every VC alike, at least one node each, so a what-if can run near
    # saturation.
    vcs = {vc: max(1, round(nodes * scale)) for vc, nodes in _vcs(vc_file).items()}
    rows = [r for r in _rows(trace) if r[3] in vcs and r[2] > 0]
    rows = rows[skip : skip + limit if limit is not None else None]
    every = round(1 / idle_fraction) if idle_fraction else 0
    total_nodes = sum(vcs.values())
    jobs = []
    origin = rows[0][0] if rows else None
    for i, (submitted, duration, gpus, vc) in enumerate(rows):
        if gpus > total_nodes * GPUS_PER_NODE:
            continue
        workers = math.ceil(gpus / GPUS_PER_NODE)
        oversized = gpus > vcs[vc] * GPUS_PER_NODE  # can only ever borrow
        picked = bool(every and i % every == 0)
        mode = "Only Idle Resources" if oversized else (idle_mode if picked else "Off")
        extra: dict = {}
        if checkpoint_every:
            extra["checkpoint_every"] = checkpoint_every
        if fault_tolerance:
            extra["fault_tolerance"] = {"run_type": "Synchronous", "max_restarts": 3}
        jobs.append(
            {
                "name": f"j{skip + i}",
                "submit_at": (submitted - origin).total_seconds(),
                "quota": f"vc-{vc}",
                "workers": workers,
                "gpus_per_worker": math.ceil(gpus / workers),
                "work": duration,
                "idle_resources": mode,
                **extra,
            }
        )
    return {
        "settings": {"start_delay": 30, "stop_grace": 30},
        "tenants": ["philly"],
        "nodes": [
            {
                "name": "philly",
                "count": total_nodes,
                "resource_type": "Lingjun",
                "gpu_type": "H200",
                "gpus": GPUS_PER_NODE,
            }
        ],
        "quotas": [
            {
                "name": f"vc-{vc}",
                "tenant": "philly",
                "resource_type": "Lingjun",
                "gpu_type": "H200",
                "gpus": nodes * GPUS_PER_NODE,
            }
            for vc, nodes in vcs.items()
        ],
        "jobs": jobs,
    }


def offered_load(raw: dict) -> float:
    """GPU-seconds the jobs ask for over the cluster's GPU-seconds while they arrive (the
    arrival rate times the mean job size over capacity; about 1: saturated)."""
    jobs = raw["jobs"]
    if not jobs:
        return 0.0
    span = max(j["submit_at"] for j in jobs) - min(j["submit_at"] for j in jobs)
    gpus = sum(n["count"] * n["gpus"] for n in raw["nodes"])
    demand = sum(j["workers"] * j["gpus_per_worker"] * j["work"] for j in jobs)
    return demand / (gpus * span) if span and gpus else 0.0
