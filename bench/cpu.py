"""Where the CPU goes during a benchmark run: cores used by each part of the product (web,
Celery worker, beat, agents, PostgreSQL's backends of the run's database, the load
generator) and the machine's busy share, sampled from /proc once a second.

Each process is followed by pid with its own user + system time (never its children's
cumulative figure, which would count a reaped child twice); a process that ends keeps its
last sample, so a short-lived one loses at most a second. PostgreSQL backends come and go:
one already there counts from the window's start, one first seen later counts whole (it
started in the window).
"""

import contextlib
import os
import threading
import time
from pathlib import Path

from bench import common
from bench.load import db_backends


def own_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1.0
    return (int(fields[11]) + int(fields[12])) / common.CLK_TCK


def tree(pid: int) -> list[int]:
    return [pid, *(d for c in common.children(pid) for d in tree(c))]


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine: busy is all but idle and iowait."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


class CpuSampler(threading.Thread):
    """`parts`: name -> root pids (each with its descendants); `alone`: name -> a pid counted
    without its descendants (the benchmark's own process, whose children are the product);
    `database`: whose PostgreSQL backends count as "postgres". `start_window()` and `stop()`
    bound the measurement."""

    def __init__(
        self,
        parts: dict[str, list[int]],
        alone: dict[str, int] | None = None,
        database: str = "",
        every: float = 1.0,
    ):
        super().__init__(daemon=True)
        self.parts, self.alone = parts, alone or {}
        self.database, self.every = database, every
        names = [*parts, *self.alone, "postgres"]
        self.last: dict[str, dict[int, float]] = {name: {} for name in names}
        self.base: dict[str, dict[int, float]] = {}
        self.started = 0.0
        self.jiffies = (0, 0)  # the machine's (busy, total) at the window's start
        self.halt = threading.Event()

    def sample(self) -> None:
        groups = {name: [p for r in roots for p in tree(r)] for name, roots in self.parts.items()}
        groups |= {name: [pid] for name, pid in self.alone.items()}
        if self.database:
            with contextlib.suppress(Exception):  # the server may be busy: skip one sample
                groups["postgres"] = db_backends(self.database)
        for name, pids in groups.items():
            seen = self.last[name]
            for pid in pids:
                cpu = own_cpu(pid)
                if cpu >= 0:
                    seen[pid] = max(cpu, seen.get(pid, 0.0))

    def run(self) -> None:
        while not self.halt.wait(self.every):
            self.sample()

    def start_window(self) -> None:
        self.sample()
        self.base = {name: dict(seen) for name, seen in self.last.items()}
        self.started = time.monotonic()
        self.jiffies = machine_jiffies()
        self.start()

    def stop(self) -> dict:
        """Cores used by each part over the window, the machine's busy share and CPU count."""
        self.halt.set()
        self.join()
        self.sample()
        seconds = time.monotonic() - self.started
        (busy0, total0), (busy1, total1) = self.jiffies, machine_jiffies()
        figures = {"window_s": round(seconds, 1), "cpus": os.cpu_count()}
        for name, seen in self.last.items():
            base = self.base.get(name, {})
            used = sum(cpu - base.get(pid, 0.0) for pid, cpu in seen.items())
            figures[f"{name}_cores"] = round(used / seconds, 2)
        figures["machine_busy_pct"] = (
            round(100 * (busy1 - busy0) / (total1 - total0), 1) if total1 > total0 else None
        )
        return figures


# -- one-shot snapshots (bench/fleet.py: the steady window's start and end) ----------------
def cpu_snapshot(pids: dict[str, list[int]], database: str) -> dict:
    snap = {name: sum(common.tree_cpu(p) for p in group) for name, group in pids.items()}
    snap["pg"] = {p: common.cpu_seconds(p) for p in db_backends(database)}  # type: ignore
    snap["busy"], snap["total"] = machine_jiffies()
    return snap


def cpu_figures(before: dict, after: dict, seconds: float) -> dict:
    """Cores used over the window by each part, and the machine's busy share."""
    # Backends come and go: each one's CPU since the start (all of it for a new one).
    after["postgres"] = sum(cpu - before["pg"].get(pid, 0.0) for pid, cpu in after["pg"].items())
    before["postgres"] = 0.0
    parts = ("web", "celery", "postgres", "fleet")
    figures = {f"{k}_cores": round((after[k] - before[k]) / seconds, 2) for k in parts}
    busy, total = after["busy"] - before["busy"], after["total"] - before["total"]
    figures["machine_busy_pct"] = round(100 * busy / total, 1) if total else None
    return figures
