"""`gpu-console quota set NAME --gpus 16 [--preview]`: the owners' API's quota change
(PATCH /api/v1/quotas/{name}; docs/quota-tree.md "Owners' API"). `--preview` is the dry
run: what the next scheduling cycle would do, and the token that saves exactly that
(`--confirm`)."""

import argparse
from typing import Any

from cli import commands
from cli.client import Client
from cli.output import plural, print_json

SETTINGS = ("gpus", "parent", "max_gpus", "lending_limit", "weight")
NONE = "none"  # --max-gpus none: no limit


def add_arguments(s: argparse.ArgumentParser) -> None:
    """`quota [NAME]` reads; `quota set NAME --gpus …` changes (quota owners)."""
    s.add_argument("target", nargs="?", help=argparse.SUPPRESS)
    s.add_argument("--gpus", type=int, help="set: the guarantee")
    s.add_argument("--parent", help="set: move it under this quota")
    s.add_argument("--max-gpus", help="set: the limit (none: no limit)")
    s.add_argument("--lending-limit", help="set: most lent outside it (none: all)")
    s.add_argument("--weight", type=float, help="set: its share of idle GPUs")
    s.add_argument("--preview", action="store_true", help="set: a dry run, nothing saved")
    s.add_argument(
        "--confirm", metavar="TOKEN", help="set: save only while the previewed state holds"
    )


def _limit(text: str | None) -> Any:
    if text is None or text.lower() == NONE:
        return None
    return int(text)


def changes(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name in SETTINGS:
        value = getattr(args, name)
        if value is not None:
            body[name] = _limit(value) if name in ("max_gpus", "lending_limit") else value
    if args.confirm:
        body["token"] = args.confirm
    return body


def cmd_quota(client: Client, args: argparse.Namespace) -> int:
    if args.name != "set":
        return commands.cmd_quota(client, args)
    if not args.target:
        raise SystemExit("gpu-console: quota set NAME --gpus N [--preview]")
    body = changes(args)
    params = "?preview=true" if args.preview else ""
    result = client.request("PATCH", f"/quotas/{args.target}{params}", body=body)
    if args.json:
        print_json(result)
        return 0
    if result["saved"]:
        q = result["quota"]
        limit = "no limit" if q["max_gpus"] is None else f"limit {q['max_gpus']}"
        guaranteed = plural(q["gpus"], "GPU")
        print(f"{q['name']} saved: {guaranteed} guaranteed, {limit}, weight {q['weight']}")
        return 0
    print(f"Preview of the change to {args.target} (nothing saved):")
    for line in result["preview"]["lines"]:
        print(f"  {line}")
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in body.items() if k != "token")
    token = result["token"]
    print(f"To save exactly this: gpu-console quota set {args.target} {flags} --confirm {token}")
    return 0
