"""How long jobs run, estimated (pure): from progress, max runtime and similar past jobs
(docs/scheduling.md). `jobs.forecast` turns these into expected starts."""

import statistics
from collections import defaultdict
from datetime import datetime, timedelta

HISTORY_PER_KEY = 20  # the median of the last N runs of the same (quota, name)


def median_durations(rows) -> dict[tuple[int, str], float]:
    """(quota id, name) → the median run time in seconds of its last HISTORY_PER_KEY runs;
    `rows` are (quota id, name, started_at, finished_at), newest first."""
    runs: dict[tuple[int, str], list[float]] = defaultdict(list)
    for quota_id, name, started, finished in rows:
        key = (quota_id, name)
        if started and finished and len(runs[key]) < HISTORY_PER_KEY:
            runs[key].append(max((finished - started).total_seconds(), 0.0))
    return {key: statistics.median(values) for key, values in runs.items() if values}


def running_end(
    *,
    now: datetime,
    started_at: datetime | None,
    max_runtime: int | None,
    progress: tuple[int | None, int | None, float | None],
    past: float | None,
) -> tuple[datetime | None, str]:
    """When a running job is expected to end, and on what that rests."""
    start = started_at or now
    bound = start + timedelta(seconds=max_runtime) if max_runtime else None
    guess, basis = None, ""
    step, total, rate = progress
    if step is not None and total and rate and rate > 0 and total >= step:
        guess, basis = now + timedelta(seconds=(total - step) / rate), "progress"
    elif past is not None:
        guess, basis = max(start + timedelta(seconds=past), now), "similar past jobs"
    if bound is not None and (guess is None or bound <= guess):
        return max(bound, now), "max runtime"
    return guess, basis


def run_length(max_runtime: int | None, past: float | None) -> tuple[float, str] | None:
    """How long a job that has not started yet is expected to run."""
    if past is not None and (not max_runtime or past <= max_runtime):
        return past, "similar past jobs"
    if max_runtime:
        return float(max_runtime), "max runtime"
    return None
