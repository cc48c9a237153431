"""No cyclic-garbage collection while a cycle runs (docs/scheduling.md, "The cycle's memory").

A cycle reads every waiting job into plain values (a row, a decoded snapshot, a decision:
about ten objects per job) and keeps them all to its end. Python's collector counts those
allocations and, every 700 of them, walks the young objects; every few passes it walks
everything the process holds (Django, Celery, the decoded rows kept between cycles). None
of those walks can free what the cycle made, all of it still in use: on an 8,000-job queue
they were about a third of a cycle's CPU (bench/scheduler.py --db).

So the collector is off for the cycle and back on after it: reference counting still frees
everything as usual, and whatever cyclic garbage the cycle left (a caught exception and its
frames) is collected by the first pass after it. Pauses nest and may overlap across threads
(the in-process loops): the collector comes back when the last one ends, and never if
something else had turned it off.
"""

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0
_resume = False  # whether the collector was on when the first pause began


@contextmanager
def collector_paused() -> Iterator[None]:
    global _pauses, _resume
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
