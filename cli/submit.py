"""`gpu-console submit`: a job from flags and/or a YAML job file; `--array N` for sweeps.

The YAML file holds the API's fields (quota, image, command, workers, gpus_per_worker, env,
fault_tolerance, …, and optionally `array: N`); flags override it. `--template NAME` starts
from a template of your workspace and `--set FIELD=VALUE` sets any field
(`gpu-console submit --template ddp-8gpu --set workers=4`). The console validates everything
(the same rules as its create page) and names the offending field.
"""

import argparse
import shlex
from pathlib import Path
from typing import Any

import yaml

from cli.client import Client, new_idempotency_key
from cli.output import print_json, table

# flag dest → API field
FLAG_FIELDS = {
    "quota": "quota",
    "workspace": "workspace",
    "name": "name",
    "image": "image",
    "workers": "workers",
    "gpus": "gpus_per_worker",
    "cpus": "cpus_per_worker",
    "memory": "memory_gb_per_worker",
    "priority": "priority",
    "idle": "idle_resources",
    "max_runtime": "max_runtime_seconds",
    "run_type": "run_type",
    "max_restarts": "max_restarts",
    "restart_policy": "restart_policy",
    "hang_timeout": "hang_timeout",
    "hang_action": "hang_action",
    "checkpoint_dir": "checkpoint_dir",
}


class SpecError(Exception):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--file", type=Path, help="a YAML job file (API field names)")
    parser.add_argument("--template", help="a template of your workspace (docs/templates.md)")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any API field (a YAML value: workers=4, fault_tolerance=true)",
    )
    parser.add_argument("--quota")
    parser.add_argument("--workspace", help="only when the quota is in several of yours")
    parser.add_argument("--name")
    parser.add_argument("--image")
    parser.add_argument("--command", dest="command_text", help="or give it after --")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--gpus", type=int, help="GPUs per worker")
    parser.add_argument("--cpus", type=int, help="CPUs per worker")
    parser.add_argument("--memory", type=int, help="GB of memory per worker")
    parser.add_argument("--priority", type=int, help="1 (lowest) to 9")
    parser.add_argument(
        "--idle", choices=["Off", "Acceptable", "Only Idle Resources"], help="idle resources"
    )
    parser.add_argument("-e", "--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--max-runtime", type=int, metavar="SECONDS")
    parser.add_argument(
        "--fault-tolerance", action="store_true", default=None, help="Automatic Fault Tolerance"
    )
    parser.add_argument("--run-type", choices=["Synchronous", "Asynchronous"])
    parser.add_argument("--max-restarts", type=int)
    parser.add_argument("--restart-policy", choices=["OnFailure", "ExitCodeAndErrorMsg"])
    parser.add_argument("--hang-timeout", type=int, metavar="SECONDS")
    parser.add_argument(
        "--hang-detection", action="store_true", default=None, help="restart or stop on hangs"
    )
    parser.add_argument(
        "--hang-action", type=str.lower, choices=["restart", "stop"], help="as on the form"
    )
    parser.add_argument("--checkpoint-dir")
    parser.add_argument(
        "--array",
        type=int,
        metavar="N",
        help="N copies; copy i gets ARRAY_INDEX=i and ARRAY_COUNT=N in its environment",
    )
    parser.add_argument("--idempotency-key", help="default: a new one per invocation")
    parser.add_argument("--json", action="store_true", help="print the API's JSON")
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="-- the command to run: its arguments are kept exactly (one argument: a shell line)",
    )


def _load_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: the job file must be a mapping of fields")
    return data


def _env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecError(f"--env wants KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _settings(pairs: list[str]) -> dict[str, Any]:
    """`--set workers=4` → {"workers": 4}: the value read as YAML (a number, true, text)."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecError(f"--set wants FIELD=VALUE, got {pair!r}")
        try:
            settings[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            settings[key] = value
    return settings


def command_line(argv: list[str]) -> str:
    """The stored command (a line the worker runs with `/bin/sh -c`) for what followed `--`.

    One argument is a command line as written (`-- 'make train && echo done'`, like
    `--command`); several are an argv kept exactly: quoted so that the shell splits the
    line back into the same arguments (`-- sh -c 'for i in 1 2; do echo $i; done'`)."""
    if len(argv) == 1:
        return argv[0]
    return shlex.join(argv)


def build_spec(args: argparse.Namespace) -> tuple[dict[str, Any], int | None]:
    """(job fields, array count or None)."""
    spec = _load_file(args.file) if args.file else {}
    array = spec.pop("array", None)
    for dest, field in FLAG_FIELDS.items():
        value = getattr(args, dest)
        if value is not None:
            spec[field] = value
    if args.fault_tolerance:
        spec["fault_tolerance"] = True
    if args.hang_detection:
        spec["hang_detection"] = True
    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if args.command_text is not None:
        spec["command"] = args.command_text
    elif command:
        spec["command"] = command_line(command)
    if args.env:
        env = spec.get("env") or {}
        if isinstance(env, str):
            raise SpecError("the job file's env is text; use a mapping to add --env values")
        spec["env"] = {**env, **_env(args.env)}
    spec.update(_settings(args.settings))
    if args.template:
        spec["template"] = args.template
    if args.array is not None:
        array = args.array
    if array is not None and spec.get("template"):
        raise SpecError("--template does not combine with --array (an array takes the fields)")
    if array is not None and (not isinstance(array, int) or isinstance(array, bool)):
        raise SpecError("array must be a whole number")
    for required in ("quota", "image", "command"):
        if not spec.get(required) and not spec.get("template"):
            raise SpecError(f"missing {required}: give --{required} or put it in the job file")
    return spec, array


def run(client: Client, args: argparse.Namespace) -> int:
    spec, array = build_spec(args)
    key = args.idempotency_key or new_idempotency_key()
    if array is None:
        created = [client.post("/jobs", spec, idempotency_key=key)]
        data: Any = created[0]
    else:
        data = client.post("/jobs/array", {"count": array, "job": spec}, idempotency_key=key)
        created = data["jobs"]
    if args.json:
        print_json(data)
    else:
        table(
            [
                (j["id"], j["name"], j["status"], j["quota"]["name"], j["status_reason"])
                for j in created
            ],
            ["ID", "NAME", "STATUS", "QUOTA", "REASON"],
        )
    return 0
