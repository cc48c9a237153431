"""`make test-deploy` on a machine without podman and mmdebstrap installs them first (as
`.ci/run` does) instead of ending in 9 errors; `make test` likewise sets up what the suite
needs (Chromium, a C compiler, podman and its test image) with the one script `.ci/run` runs;
the README says how to pick `make run`'s port."""

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


# -- make test on a fresh machine (scripts/test-tools) ----------------------------------------

TEST_PACKAGES = ("chromium", "gcc", "libc6-dev", "podman", "busybox-static")


def test_make_test_sets_up_the_machine_before_the_suite():
    plan = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert plan.index("scripts/test-tools") < plan.index("pytest")
    ci = (ROOT / ".ci/run").read_text()
    assert "scripts/test-tools" in ci and "apt-get" not in ci  # CI installs through it too


def _tools(tmp_path, **tools: str) -> dict[str, str]:
    """An environment whose PATH holds only these stub commands (name → shell body)."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name, body in tools.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    # Never the real podman service's socket (what follows an install is not run here).
    return {**os.environ, "PATH": str(stubs), "PODMAN_SOCKET": str(tmp_path / "podman.sock")}


def _test_tools(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", str(ROOT / "scripts/test-tools"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_test_tools_names_what_is_missing(tmp_path):
    result = _test_tools(_tools(tmp_path), "--check")  # nothing to be found
    assert result.returncode == 1
    for package in TEST_PACKAGES:
        assert package in result.stdout


def test_test_tools_finds_them_all(tmp_path):
    libc = tmp_path / "libc.a"
    libc.write_text("")
    there = {name: "exit 0" for name in ("chromium", "podman", "runc", "busybox")}
    result = _test_tools(_tools(tmp_path, cc=f"echo {libc}", **there), "--check")
    assert (result.returncode, result.stdout.startswith("all there")) == (0, True), result


def test_test_tools_prints_the_command_when_not_root(tmp_path):
    log = tmp_path / "apt.log"
    env = _tools(tmp_path, id="echo 1000", **{"apt-get": f'echo "$*" >> {log}'})
    result = _test_tools(env)
    assert result.returncode == 1
    assert "sudo apt-get install" in result.stderr
    assert all(package in result.stderr for package in TEST_PACKAGES)
    assert not log.exists()  # nothing installed


def test_test_tools_installs_with_apt_get_as_root(tmp_path):
    log = tmp_path / "apt.log"
    env = _tools(tmp_path, id="echo 0", **{"apt-get": f'echo "$*" >> {log}'})
    _test_tools(env)  # the stubs install nothing: what follows fails, and is not looked at
    update, install = log.read_text().splitlines()
    assert update == "update -qq"
    assert install.startswith("install -y -qq ")
    assert set(TEST_PACKAGES) <= set(install.split())
