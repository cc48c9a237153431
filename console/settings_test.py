"""Settings for the test suite: the real settings plus test defaults.

pytest-django imports this before any conftest runs, so the environment defaults must be
set here. Background triggers run synchronously after commit ("eager") unless a test
starts real loops; tests that start the real console (tests/e2e) pass their own env.
"""

import os

os.environ.setdefault("CONSOLE_ENV", "test")
os.environ.setdefault("CONSOLE_LOOPS", "eager")

from console.settings import *  # noqa: F403
from console.settings import STATIC_ROOT

# Real password hashing costs ~0.5 s per user created; tests need none of its strength.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# WhiteNoise warns (an error under our warning filters) when STATIC_ROOT is missing.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Every request computes its own forecast (tests of the cache turn it on).
FORECAST_CACHE_SECONDS = 0
# Per-process caches of tokens and rules (accounts.versions) are off: a test's own
# transaction never commits, so a change would never bump them (tests of them turn it on).
VERSION_STORE_URL = ""
