"""`make test-deploy` on a machine without podman and mmdebstrap installs them first (as
`.ci/run` does) instead of ending in 9 errors; the README says how to pick `make run`'s port."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_test_deploy_installs_its_tools_before_the_tests():
    plan = subprocess.run(
        ["make", "-n", "test-deploy"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert "scripts/deploy-tools" in plan
    assert plan.index("scripts/deploy-tools") < plan.index("pytest tests/deploy")


def test_deploy_tools_names_what_is_missing(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing to be found
    result = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts/deploy-tools"), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    for package in ("podman", "busybox-static", "mmdebstrap"):
        assert package in result.stdout


def test_the_readme_says_how_to_choose_the_port():
    assert 'make run RUN_ARGS="--port' in (ROOT / "README.md").read_text()
