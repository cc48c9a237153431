"""The Philly trace (shared/traces/README.md) as a scenario: a real workload for what-ifs.

One Lingjun tenant; one quota per virtual cluster sized from philly_vc.csv (nodes x 8 GPUs);
that many 8-GPU H200 nodes; jobs in submit order with time 0 at the first one, workers of at
most 8 GPUs (ceil(GPUs / 8) workers, GPUs spread evenly), the trace's duration as work.
Jobs of the four VCs missing from the table are dropped. Jobs larger than their VC can never
run in quota, so they are submitted with `Only Idle Resources` (borrowing the tenant's unused
quota); `idle_fraction` turns every k-th other job into an idle one too.
"""

import csv
import math
from datetime import datetime
from pathlib import Path

from jobs.simulator.scenario import ScenarioError

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
) -> dict:
    if not 0 <= idle_fraction <= 1:
        raise ScenarioError(f"--idle-fraction: must be between 0 and 1, got {idle_fraction}")
    vcs = _vcs(vc_file)
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
        idle = gpus > vcs[vc] * GPUS_PER_NODE or (every and i % every == 0)
        jobs.append(
            {
                "name": f"j{skip + i}",
                "submit_at": (submitted - origin).total_seconds(),
                "quota": f"vc-{vc}",
                "workers": workers,
                "gpus_per_worker": math.ceil(gpus / workers),
                "work": duration,
                "idle_resources": "Only Idle Resources" if idle else "Off",
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
