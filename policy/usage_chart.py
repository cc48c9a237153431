"""The Usage page's charts over time (docs/usage-history.md "Reading it"), pure: each
bucket's numbers over the part of it the history covers.

The history covers time up to its horizon: the last roll-up's run, never after now. A
bucket that starts at or after the horizon has no numbers yet (None: the chart leaves it
blank instead of drawing a 0 for the future); the bucket the horizon falls in is measured
over its covered part only (an hour 40 minutes old is a share of 40 minutes, not of 60: a
cluster busy for those 40 minutes is at 100 %, not 67 %); earlier buckets are whole.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

MICROS = 1_000_000


def covered_seconds(
    starts: Sequence[datetime], step: timedelta, horizon: datetime
) -> list[float | None]:
    """Seconds of each bucket (starting at `starts`, `step` long) the history covers."""
    whole = step.total_seconds()
    return [
        None if start >= horizon else min((horizon - start).total_seconds(), whole)
        for start in starts
    ]


def gpu_hours(
    used_us: Sequence[int], covered: Sequence[float | None], whole: float
) -> list[float | None]:
    """GPU-microseconds per bucket as GPU-hours per bucket (`whole` seconds long) at the
    pace of its covered part: a whole bucket's GPU-hours; the current one's so far, scaled
    to the bucket (3 GPUs for the 40 minutes of an hour so far: 3, not 2). None where
    nothing is covered yet."""
    return [
        None if not c else round(u / (3600 * MICROS) * whole / c, 2)
        for u, c in zip(used_us, covered, strict=True)
    ]


def guarantee_hours(gpus: int, covered: Sequence[float | None], whole: float) -> list[float | None]:
    """What a guarantee of `gpus` GPUs amounts to over a bucket; None where nothing is
    covered yet (the chart stops where the history does)."""
    return [None if not c else round(gpus * whole / 3600, 2) for c in covered]


def share_percent(
    used_us: Sequence[int], gpus: int, covered: Sequence[float | None]
) -> list[float | None]:
    """GPU-microseconds per bucket as a percentage of `gpus` GPUs over its covered part;
    None where nothing is covered (or there are no GPUs to be a share of)."""
    return [
        None if not c or not gpus else round(100 * u / (gpus * c * MICROS), 2)
        for u, c in zip(used_us, covered, strict=True)
    ]
