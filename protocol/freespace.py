"""Before a long run (docs/results.md): a worker's output folder must have the free space its
job expects (`expected_output_gb`, else limits.OUTPUT_FREE_FLOOR_MB) when it starts. The one
rule the node agent (agents.node.room) and the Kubernetes controller (kube.volumes) apply,
each to the filesystem its worker's output folder lies on."""

import shutil
from collections.abc import Callable
from pathlib import Path

from protocol import limits

GB = 10**9
MB = 10**6


def free_space_problem(
    folder: Path,
    expected_gb: int | None,
    *,
    usage: Callable[[Path], tuple[int, int, int]] = shutil.disk_usage,
    shown: str = "",
) -> str:
    """Why `folder`'s filesystem cannot take the output ("" when it can). `shown`: the
    folder's name in the message when the reader knows it by another path (a worker's
    mount of the same volume)."""
    need = expected_gb * GB if expected_gb else limits.OUTPUT_FREE_FLOOR_MB * MB
    try:
        free = usage(folder)[2]
    except OSError:  # cannot tell: let the start go on (the worker's own error says)
        return ""
    if free >= need:
        return ""
    asked = f"the job expects {expected_gb:,} GB" if expected_gb else f"the floor is {_size(need)}"
    where = shown or folder
    return f"not enough free space for the output: {_size(free)} free on {where}, {asked}"


def _size(n: int) -> str:
    return f"{n / GB:,.1f} GB" if n >= GB else f"{n / MB:,.0f} MB"
