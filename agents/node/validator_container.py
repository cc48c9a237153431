"""The result's validator under the docker runtime (docs/results.md, "The validator"): a
container of the job's own image runs the command with the run's result folder mounted
read-only at /result (`RESULT_DIR`, also its working folder), no network, no new
privileges, the worker's environment without the agent's host paths. Polled like the
process runtime's (`agents.node.validator.poll`): past limits.RESULT_VALIDATOR_SECONDS it is
killed and the outcome has no exit code; its last lines are the report. The container is
removed once read. It carries no `managed` label: an agent restart never adopts it as a
worker (it runs the validator again; the name is reused, a leftover removed first)."""

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from docker.errors import DockerException, NotFound
from docker.types import Mount

from agents.node.runtimes.container_config import HOST_PATH_ENVS, LABEL, container_name
from agents.node.validator import last_lines_of, not_run
from protocol import limits
from protocol.agent import ValidatorReport

MOUNT = "/result"


@dataclass
class ContainerValidation:
    api: Any  # docker.APIClient
    container_id: str
    started: float

    def poll(self, now: float | None = None) -> ValidatorReport | None:
        """The outcome once it ended, else None; an engine that does not answer is asked
        again at the next poll (within the time limit), a container gone is not run."""
        now = time.monotonic() if now is None else now
        try:
            return self._poll(now)
        except NotFound:
            return not_run("the validator's container disappeared")
        except (DockerException, requests.RequestException):
            if now - self.started > limits.RESULT_VALIDATOR_SECONDS + 60:
                return not_run("the engine did not answer about the validator's container")
            return None

    def _poll(self, now: float) -> ValidatorReport | None:
        state = self.api.inspect_container(self.container_id)["State"]
        timed_out = state.get("Running") and now - self.started > limits.RESULT_VALIDATOR_SECONDS
        if state.get("Running") and not timed_out:
            return None
        if timed_out:
            with contextlib.suppress(Exception):
                self.api.kill(self.container_id)
            self.api.wait(self.container_id, timeout=30)
        raw = self.api.logs(self.container_id, stdout=True, stderr=True, tail=200)
        tail = last_lines_of(raw.decode("utf-8", "replace"))
        code = self.api.inspect_container(self.container_id)["State"].get("ExitCode")
        with contextlib.suppress(Exception):
            self.api.remove_container(self.container_id, force=True)
        if timed_out:
            return not_run(f"{tail}\ntimed out after {limits.RESULT_VALIDATOR_SECONDS} s".strip())
        return ValidatorReport(exit_code=max(-1024, min(1024, int(code or 0))), output=tail)


def validator_config(
    *, node: str, pod_id: int, attempt: int, image: str, command: str,
    env: Mapping[str, str], result_dir: Path,
) -> dict:  # fmt: skip
    """The validator container's create arguments (pure)."""
    environment = {k: v for k, v in env.items() if k not in HOST_PATH_ENVS}
    return {
        "image": image,
        "command": ["/bin/sh", "-c", command],
        "name": f"{container_name(node, pod_id, attempt)}-validator",
        "labels": {
            f"{LABEL}.validator": "true",
            f"{LABEL}.node": node,
            f"{LABEL}.pod": str(pod_id),
        },
        "environment": {**environment, "RESULT_DIR": MOUNT},
        "working_dir": MOUNT,
        "network_disabled": True,
        "host_config": {
            "mounts": [Mount(MOUNT, str(result_dir), type="bind", read_only=True)],
            "init": True,
            "privileged": False,
            "security_opt": ["no-new-privileges"],
        },
    }


def start(api: Any, config: dict) -> ContainerValidation:
    """Create and start it (a leftover of the same name, from before an agent restart,
    removed first). Raises the engine's errors."""
    with contextlib.suppress(Exception):
        api.remove_container(config["name"], force=True)
    host = api.create_host_config(**config.pop("host_config"))
    created = api.create_container(**config, host_config=host)
    api.start(created["Id"])
    return ContainerValidation(api, created["Id"], time.monotonic())
