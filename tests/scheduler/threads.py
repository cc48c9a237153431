"""Run callables in threads that meet at a barrier, each on its own DB connection."""

import threading
from collections.abc import Callable

from django.db import connections


def run_together(*calls: Callable[[], object], timeout: float = 60) -> list[tuple[str, object]]:
    """Start every call at the same moment; return [("ok", value) | ("error", exc)]."""
    barrier = threading.Barrier(len(calls))
    results: list[tuple[str, object]] = [("error", TimeoutError("did not finish"))] * len(calls)

    def worker(i: int, call: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[i] = ("ok", call())
        except Exception as exc:
            results[i] = ("error", exc)
        finally:
            connections.close_all()  # or the test database cannot be dropped

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results
