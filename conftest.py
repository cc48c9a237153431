"""Root pytest configuration: run the suite with test defaults unless told otherwise."""

import os

# Background triggers run synchronously after commit in tests (console.triggers), unless a
# test starts real loops itself. Must be set before Django reads its settings.
os.environ.setdefault("CONSOLE_ENV", "test")
os.environ.setdefault("CONSOLE_LOOPS", "eager")
