"""`gpu-console result JOB [--download DIR]`: a job's result report (GET /api/v1/jobs/{id}/
result, docs/results.md); --download fetches every accepted file and verifies its sha256.
`gpu-console compare JOB OTHER`: what differs between two runs (GET …/compare?with=OTHER)."""

import argparse
import hashlib
import json
import sys
from pathlib import Path, PurePosixPath

from cli.client import ApiFailure, Client
from cli.output import print_json, table


def add_parser(sub, job_id) -> None:
    s = sub.add_parser("result", help="a job's result: verdict, units, files (--download DIR)")
    s.add_argument("job", type=job_id)
    s.add_argument("--download", metavar="DIR", help="fetch every accepted file into DIR")
    s.add_argument("--json", action="store_true")


def _pages(client: Client, job: int) -> tuple[dict, list[dict]]:
    """The report (its first page) and the files of every page."""
    report = client.get(f"/jobs/{job}/result")
    files, page = list(report["files"]), report
    while page["units"]["next_after"] is not None:
        page = client.get(f"/jobs/{job}/result", after=page["units"]["next_after"])
        files += page["files"]
    return report, files


def cmd_result(client: Client, args: argparse.Namespace) -> int:
    report, files = _pages(client, args.job)
    if args.json:
        print_json({**report, "files": files})
    else:
        _print(report, files)
    if not args.download:
        return 0
    bad = download(client, args.job, files, Path(args.download))
    if bad:
        print(f"sha256 mismatch: {', '.join(bad)}", file=sys.stderr)
        return 1
    print(f"downloaded {len(files)} files into {args.download}, sha256 verified")
    return 0


def _print(report: dict, files: list[dict]) -> None:
    units, run = report["units"], report["run"]
    print(f"Result    {report['state']}: {report['reason']}")
    if report["progress"]:
        print(f"Progress  {report['progress']}")
    if run["run_id"]:
        print(f"Run       {run['run_id']} (config sha256 {run['config_sha256'][:12]})")
    for attempt in run["attempts"]:
        what = attempt["image_digest"] or attempt["executable"]
        code = f", code {attempt['code_version'][:12]}" if attempt["code_version"] else ""
        if attempt.get("inputs_fingerprint"):  # absent from an older console's report
            code += f", data {attempt['inputs_fingerprint'][:12]} ({attempt['inputs_files']} files)"
        if attempt.get("inputs_sha256"):  # the job asked for its data's content
            code += f", content sha256 {attempt['inputs_sha256'][:12]}"
        print(f"Attempt {attempt['attempt']} rank {attempt['rank']}: {what}{code}")
    if units["missing"]:
        print(f"Missing   {', '.join(units['missing'][:20])}")
    if units["conflicts"]:
        print(f"Conflicts {', '.join(units['conflicts'])}")
    if files:
        print()
        table(
            [(f["unit"], f["path"], f["size"], f["sha256"][:16]) for f in files],
            ["UNIT", "PATH", "SIZE", "SHA256"],
        )


def download(client: Client, job: int, files: list[dict], folder: Path) -> list[str]:
    """Every file into `folder` (its relative path kept); returns the paths whose sha256
    does not match the report."""
    bad = []
    for entry in files:
        relative = PurePosixPath(entry["path"])
        if relative.is_absolute() or ".." in relative.parts:
            raise ApiFailure(f"refusing to write {entry['path']} outside {folder}")
        target = folder.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(target, "wb") as out:
            for block in client.stream(f"/jobs/{job}/result/files/{entry['path']}"):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != entry["sha256"]:
            bad.append(entry["path"])
    return bad


def add_compare_parser(sub, job_id) -> None:
    s = sub.add_parser("compare", help="what differs between two runs (configuration, resolved)")
    s.add_argument("job", type=job_id)
    s.add_argument("other", type=job_id, help="the job (run) to compare with")
    s.add_argument("--json", action="store_true")


def cmd_compare(client: Client, args: argparse.Namespace) -> int:
    found = client.get(f"/jobs/{args.job}/compare", **{"with": args.other})
    if args.json:
        print_json(found)
        return 0
    print(f"{found['run_id']} vs {found['with_run_id']}")
    if found["identical"]:
        print("identical: the same effective configuration and resolved identity")
        return 0
    table(
        [
            (c["key"], shown(c["this"], c["this_set"]), shown(c["other"], c["other_set"]))
            for c in found["changes"]
        ],
        ["SETTING", f"#{found['job']}", f"#{found['with_job']}"],
    )
    return 0


def shown(value, present: bool = True) -> str:
    """As the job page prints a setting (policy.run_compare.shown; the CLI imports none of
    the console's code): text as it is, the rest as JSON, absent as "—"."""
    if not present:
        return "—"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, sort_keys=True, default=str)
