"""How long a node's workers may run without the console hearing from it (docs/fault-tolerance.md).

Each applied heartbeat grants the node a lease: `lease_seconds` after the agent *sent* that
heartbeat. The agent writes the lease to a file; each worker's own wrapper
(agents/node/fence/fencewrap.c) reads it, sends the worker SIGTERM when it runs out and
SIGKILL `kill_grace` seconds later, even if the agent itself is frozen. The console declares
the workers lost only after NODE_LOST_TIMEOUT of silence, counted from its own receive time
of the last applied heartbeat, which is after the agent sent it. So with

    lease_seconds + kill_grace + margin <= NODE_LOST_TIMEOUT

every copy is gone before a new attempt may start. The margin absorbs clock-rate skew
between the two machines, the wrapper's polling and a loaded host.
"""

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

WRAPPER_POLL = 0.2  # seconds between the wrapper's looks at the lease


@dataclass(frozen=True)
class FenceTiming:
    lease_seconds: float
    kill_grace: float
    margin: float


def plan_fence(node_lost_timeout: float, fence_timeout: float | None = None) -> FenceTiming:
    """The lease, the grace and the margin for a node-lost timeout (pure).

    By default the margin is a tenth of the timeout (at least 2 s), the grace a tenth (at
    least 1 s, at most 30 s), and the lease the rest. `fence_timeout` sets the lease
    explicitly; it must leave the grace and the margin before the timeout.
    """
    margin = max(2.0, 0.1 * node_lost_timeout) + WRAPPER_POLL
    grace = min(30.0, max(1.0, 0.1 * node_lost_timeout))
    lease = node_lost_timeout - margin - grace if fence_timeout is None else float(fence_timeout)
    if lease <= 0 or lease + grace + margin > node_lost_timeout:
        raise ImproperlyConfigured(
            f"NODE_LOST_TIMEOUT={node_lost_timeout:g}s leaves no room for the worker fence: "
            f"lease {lease:g}s + kill grace {grace:g}s + safety margin {margin:g}s must fit "
            "in it (raise NODE_LOST_TIMEOUT or lower WORKER_FENCE_TIMEOUT)"
        )
    return FenceTiming(lease_seconds=lease, kill_grace=grace, margin=margin)


def fence_timing() -> FenceTiming:
    """The configured timing (settings NODE_LOST_TIMEOUT, WORKER_FENCE_TIMEOUT)."""
    return plan_fence(settings.NODE_LOST_TIMEOUT, getattr(settings, "WORKER_FENCE_TIMEOUT", None))
