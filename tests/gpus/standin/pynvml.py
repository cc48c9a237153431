"""`pynvml` for a subprocess (scripts/gpu-smoke.sh --dry-run): this directory goes first on
PYTHONPATH, and importing `pynvml` yields the stand-in (tests.gpus.fakenvml) over the world
in the JSON file FAKE_NVML_WORLD names."""

import sys

from tests.gpus.fakenvml import from_env

sys.modules[__name__] = from_env()  # type: ignore[assignment]
