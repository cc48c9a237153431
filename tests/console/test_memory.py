"""What a server process loads once is frozen out of the collector's walks (console.memory):
a web worker as it imports the WSGI application (the views included, else imported after
the freeze at the first request), a Celery pool process forked from the worker as it
starts (not the process that loaded the app, where the solo pool sends the same signal).
Each in a fresh interpreter: a freeze here would keep the test run's own objects for ever."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REPORT = (
    "import gc, json, sys; "
    "print(json.dumps({'frozen': gc.get_freeze_count(), 'views': 'web.views' in sys.modules}))"
)


def _run(code: str) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{REPORT}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_setting_django_up_freezes_nothing_of_ours():
    found = _run("import django; django.setup()")
    assert found["frozen"] < 1_000  # the interpreter's own start-up objects


def test_the_wsgi_application_freezes_what_it_loaded_views_included():
    found = _run("import console.wsgi")
    assert found["views"] is True
    assert found["frozen"] > 50_000  # Django, the apps, the views: ~130,000 objects


def test_a_celery_pool_process_freezes_at_its_start():
    """As prefork starts a pool process: forked from the worker that loaded the app, then
    the signal in the child."""
    found = _run(
        "import django, os, sys; django.setup()\n"
        "from celery import signals\n"
        "import console.celery\n"
        "if os.fork():\n"
        "    os.wait(); sys.exit(0)\n"
        "signals.worker_process_init.send(sender=None)"
    )
    assert found["frozen"] > 50_000


def test_the_solo_pool_in_the_process_that_loaded_the_app_freezes_nothing():
    """The solo pool sends the same signal in the loading process itself (a test run's
    embedded worker): its heap is not ours to freeze."""
    found = _run(
        "import django; django.setup()\n"
        "from celery import signals\n"
        "import console.celery\n"
        "signals.worker_process_init.send(sender=None)"
    )
    assert found["frozen"] < 1_000
