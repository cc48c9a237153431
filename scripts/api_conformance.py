"""Schemathesis (pinned in pyproject's dev extra) against the real console: a fresh SQLite
console (`manage.py run_console`, its demo data and API token), one agent with the
`simulated` runtime (workers are timers: no generated command ever runs), the API rate
limits raised for the run. Every operation of the served OpenAPI document gets generated
requests, valid and invalid, and stateful sequences that follow the document's links; a run
passes with 0 server errors and 0 conformance failures (status codes, content types,
headers, response schemas, invalid data accepted, authentication ignored). Bounded: a number
of examples per operation and a time budget. Run by `make api-conformance` and `.ci/run`.

    python scripts/api_conformance.py [--max-time 150] [--max-examples 25] [--seed N]

Prints the cases generated, the failures and the time; the reports (JSON, JUnit) and the
console's log go to var/artifacts/schemathesis/. Run it with the project's Python
(`.venv/bin/python`): it starts the console with the interpreter that runs it.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scripts.throwaway import console_env, free_port, manage, stop, wait_for  # noqa: E402

REPORTS = ROOT / "var" / "artifacts" / "schemathesis"
# Every check but one: a schema-valid job may still be refused (a quota the user does not
# have, a blank command, a worker no node can hold), which no document can say.
CHECKS = "all"
EXCLUDED = "positive_data_acceptance"
NODE = "conformance-gpu-0"


def get_json(url: str, token: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = requests.get(url, headers=headers, timeout=10)
    response.raise_for_status()
    return response.json()


@contextmanager
def running_console(var_dir: Path, log_path: Path):
    """The real console on a fresh SQLite database, with a simulated agent: (url, token)."""
    # SQLite in var_dir; a log request with follow=true answers at once, not after 30 s.
    env = console_env(var_dir, without=("DATABASE_URL",), API_LOG_WAIT_MAX="0")
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")
    token = json.loads((var_dir / "demo-credentials.json").read_text())["api_token"]
    bootstrap = manage(env, "create_agent_token", "--note", "API conformance").strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        console = subprocess.Popen(
            [sys.executable, "manage.py", "run_console", "--no-agent", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        agent = None
        try:
            wait_for("/healthz", lambda: get_json(f"{url}/healthz")["status"] == "ok", console, 90)
            agent = subprocess.Popen(
                [sys.executable, "-m", "agents.node", "--server", url, "--name", NODE,
                 "--state-dir", str(var_dir / "agent"), "--runtime", "simulated",
                 "--fake-gpus", "8xH200", "--cpus", "112", "--memory-gb", "2048",
                 "--parent-pid", str(console.pid)],
                cwd=ROOT, env=env | {"GPU_AGENT_BOOTSTRAP_TOKEN": bootstrap},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

            def node_ready() -> bool:
                nodes = get_json(f"{url}/api/v1/nodes", token)["nodes"]
                return any(n["name"] == NODE and n["state"] == "Ready" for n in nodes)

            wait_for("the simulated agent", node_ready, console, 90)
            yield url, token
        finally:
            stop(console, timeout=60)
            if agent is not None:
                stop(agent, timeout=30)


def config(url: str, token: str) -> str:
    """schemathesis.toml: real values offered half the time where the API needs them to
    get past "not found" (the demo researcher's quotas, the node) and workers small enough
    to be placed, so created jobs, and the links from them, are real."""
    quotas = get_json(f"{url}/api/v1/quotas", token)["quotas"]
    refs = [q["name"] for q in quotas] + [q["id"] for q in quotas]
    small = {"workers": [1, 2], "gpus_per_worker": [0, 1], "cpus_per_worker": [1, 2],
             "memory_gb_per_worker": [1, 2]}  # fmt: skip
    dictionaries = {"quotas": refs, "nodes": [NODE], **small}
    lines = ["[dictionaries]"]
    lines += [
        f"{name} = {{ values = {json.dumps(values)} }}" for name, values in dictionaries.items()
    ]
    lines += ["", "[parameters]"]
    bound = {"path.ref": "quotas", "path.name": "nodes"}
    for prefix in ("body", "body.jobs[*]", "body.job"):
        bound[f"{prefix}.quota"] = "quotas"
        bound.update({f"{prefix}.{name}": name for name in small})
    lines += [
        f'"{key}" = {{ dictionary = "{name}", probability = 0.5 }}' for key, name in bound.items()
    ]
    return "\n".join(lines) + "\n"


def schemathesis(url: str, token: str, options, var_dir: Path) -> int:
    config_path = var_dir / "schemathesis.toml"
    config_path.write_text(config(url, token))
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file", str(config_path),
        "run", f"{url}/api/v1/openapi.json",
        "--header", f"Authorization: Bearer {token}",
        "--checks", CHECKS, "--exclude-checks", EXCLUDED,
        "--max-examples", str(options.max_examples),
        "--max-time", str(options.max_time),
        "--workers", str(options.workers),
        "--request-timeout", "30",
        "--suppress-health-check", "all",
        "--report", "json,junit", "--report-dir", str(REPORTS),
        "--report-json-path", str(REPORTS / "report.json"),
        "--report-junit-path", str(REPORTS / "junit.xml"),
        "--no-color",
    ]  # fmt: skip
    if options.seed is not None:
        command += ["--seed", str(options.seed)]
    return subprocess.run(command, cwd=var_dir, timeout=options.max_time + 600).returncode


def summary(started: float) -> str:
    report = json.loads((REPORTS / "report.json").read_text())
    cases = report["test_cases"]
    failures = sum(failure["count"] for failure in report["failures"])
    return (
        f"Schemathesis {report['schemathesis_version']}: {cases['generated']} cases generated "
        f"over {report['operations']['tested']} operations in {report['running_time']:.0f} s "
        f"(seed {report['seed']}; {time.monotonic() - started:.0f} s with the console's "
        f"start), {failures} failures, {len(report['errors'])} errors"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-time", type=int, default=150, help="seconds of testing")
    parser.add_argument("--max-examples", type=int, default=25, help="per operation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    options = parser.parse_args()
    started = time.monotonic()
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / "report.json").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="api-conformance-") as tmp:
        var_dir = Path(tmp)
        with running_console(var_dir, REPORTS / "console.log") as (url, token):
            status = schemathesis(url, token, options, var_dir)
    if (REPORTS / "report.json").exists():
        print(summary(started))
    return status


if __name__ == "__main__":
    sys.exit(main())
