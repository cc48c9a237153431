"""What a server process loads once is kept out of the cyclic collector's walks
(docs/processes.md, "Memory: the collector").

A gunicorn web worker holds about 145,000 objects once Django, the apps and the views are
loaded (a Celery pool process 175,000-200,000), all of them alive until the process ends.
Each full pass of Python's collector walked every one of them to free nothing: in the full
Kueue variant (bench/kueue.py) the four web workers spent 37 s of a 244 s run in the
collector, 20 s of it in 10-15 full passes each, a few hundred milliseconds each under
load. `gc.freeze()` moves them to a generation the collector never walks; reference
counting still frees them as before, and the objects made afterwards (requests, tasks) are
collected as usual.
"""

import gc


def freeze_loaded() -> None:
    """Freeze what the process has loaded: the URLconf and views first (else imported at the
    first request, after the freeze), then a collection, so the imports' own garbage is freed
    rather than frozen for ever."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 (the attribute's read imports every view)
    gc.collect()
    gc.freeze()
