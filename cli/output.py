"""Tables and durations for people, JSON for scripts."""

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO


def print_json(data: Any, out: TextIO = sys.stdout) -> None:
    json.dump(data, out, indent=2, ensure_ascii=False)
    out.write("\n")


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out: TextIO | None = None) -> None:
    out = out if out is not None else sys.stdout  # read now: a redirect after import counts
    cells = [[str(h) for h in headers]] + [
        ["" if v is None else str(v) for v in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(max(seconds, 0))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def age(text: str | None, now: datetime | None = None) -> str:
    moment = parse_time(text)
    if moment is None:
        return ""
    return duration(((now or datetime.now(UTC)) - moment).total_seconds())


def runtime(job: dict, now: datetime | None = None) -> str:
    started = parse_time(job.get("started_at"))
    if started is None:
        return ""
    end = parse_time(job.get("finished_at")) or now or datetime.now(UTC)
    return duration((end - started).total_seconds())


def plural(count: int, noun: str) -> str:
    """ "1 GPU", "2 GPUs" (the console's own rule, protocol.words: the CLI imports nothing)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def gpus(job: dict) -> int:
    return job["workers"] * job["gpus_per_worker"]
