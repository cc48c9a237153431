"""Before a long run (docs/results.md): a worker's output folder must have the free space its
job expects (`expected_output_gb`, else limits.OUTPUT_FREE_FLOOR_MB) when the agent starts
it; short of that the agent refuses the start on this node. A node's condition, not the
job's failure: the report says `ended_by: node_refused`, and the console tries the job on
another node without using its restart budget. A worker that would resume a run whose code
or program changed since its accepted units were made is refused too (`ended_by:
resume_refused`, protocol.units.resume_refusal): the job's condition, never retried."""

import shutil
from collections.abc import Callable
from pathlib import Path

from protocol import limits
from protocol.agent import NODE_REFUSED, RESUME_REFUSED

GB = 10**9
MB = 10**6


class NodeRefused(Exception):
    """The start is refused on this node (WorkerReport.ended_by)."""

    ended_by: str = NODE_REFUSED


class ResumeRefused(NodeRefused):
    """The start is refused on every node: the run it would resume changed."""

    ended_by = RESUME_REFUSED


def free_space_problem(
    folder: Path,
    expected_gb: int | None,
    *,
    usage: Callable[[Path], tuple[int, int, int]] = shutil.disk_usage,
) -> str:
    """Why `folder`'s filesystem cannot take the output ("" when it can)."""
    need = expected_gb * GB if expected_gb else limits.OUTPUT_FREE_FLOOR_MB * MB
    try:
        free = usage(folder)[2]
    except OSError:  # cannot tell: let the start go on (the worker's own error says)
        return ""
    if free >= need:
        return ""
    asked = f"the job expects {expected_gb:,} GB" if expected_gb else f"the floor is {_size(need)}"
    return f"not enough free space for the output: {_size(free)} free on {folder}, {asked}"


def _size(n: int) -> str:
    return f"{n / GB:,.1f} GB" if n >= GB else f"{n / MB:,.0f} MB"
