"""`make run`'s start prints no warning: its three steps (migrate, seed_demo, run_console with
the local agent) on a fresh data folder, started, used until the local node is Ready, and
stopped with Ctrl-C. A Python warning (`UserWarning: No directory at …`, a deprecation), a
log line at WARNING or a "warning:" of a tool all count. The packaging half (setuptools'
licence deprecation when `make run` installs the project) is checked on pyproject.toml."""

import re
import signal
import subprocess
import sys
import tomllib

import pytest
import requests

from tests.e2e.conftest import ROOT, console_database, console_env, free_port, wait_for

pytestmark = pytest.mark.e2e

WARNING = re.compile(r"warn", re.IGNORECASE)


def _step(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_the_consoles_start_prints_no_warning(tmp_path):
    var_dir = tmp_path / "var"  # fresh: no staticfiles folder, no database yet
    with console_database() as database:
        env = console_env(var_dir, database)
        output = _step(env, "migrate", "--noinput") + _step(env, "seed_demo")
        port = free_port()
        log = tmp_path / "console.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "run_console", "--port", str(port)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            url = f"http://127.0.0.1:{port}"

            def page_served() -> bool:
                assert process.poll() is None, log.read_text()
                try:
                    return requests.get(f"{url}/login/", timeout=5).status_code == 200
                except requests.ConnectionError:
                    return False

            wait_for(page_served, 60, message="the console did not come up")
            # A static file through WhiteNoise, and the local agent registered.
            assert requests.get(f"{url}/static/console.css", timeout=5).status_code == 200
            wait_for(lambda: "registered node" in log.read_text(), 60, message="no agent")
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=90)
    output += log.read_text()
    assert "Console running at" in output
    warnings = [line for line in output.splitlines() if WARNING.search(line)]
    assert warnings == [], output


def test_the_package_licence_is_an_spdx_expression():
    """setuptools deprecates `license = { text = … }` (a warning on every install, removed
    in 2027); a plain SPDX string needs setuptools 77 or later to build."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    requires = project["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(7[7-9]|[89]\d|\d{3,})(\.\d+)*", r) for r in requires)
