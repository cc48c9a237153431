"""A seam for tests that act between `plan()` and the cycle's writes (inside its lock and
transaction): the cycle's `plan` wrapped, nothing in production code."""

from collections.abc import Callable

from jobs.scheduler import cycle
from policy.scheduler.model import Plan


def after_plan(monkeypatch, hook: Callable[[Plan], None]) -> Callable:
    """Call `hook(plan)` once each cycle has planned; returns the real `plan` (to restore)."""
    real = cycle.plan

    def planned(*args, **kwargs) -> Plan:
        decided = real(*args, **kwargs)
        hook(decided)
        return decided

    monkeypatch.setattr(cycle, "plan", planned)
    return real
