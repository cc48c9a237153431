"""scripts/gpu-smoke.sh --dry-run: the whole smoke test (console, real agent, a job asking the
CUDA driver API which GPU it has) on the stand-in NVML, CUDA driver and nvidia-smi. On a GPU
machine the same script runs without --dry-run."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_gpu_smoke_test_passes_on_the_stand_in_machine():
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-smoke.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert out.count("-> ok") == 4  # every GPU's index, UUID and memory match nvidia-smi
    assert "probe job" in out and "placed on GPU [3]" in out
    assert "'CUDA_DEVICE_ORDER': 'PCI_BUS_ID'" in out
    assert "stored sample: 97% busy, 1024 MiB on 1 GPU" in out
    assert "PASS: the job saw GPU 3" in out and "gpu-smoke: passed" in out
