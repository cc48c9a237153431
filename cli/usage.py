"""`gpu-console usage`: usage history (GET /api/v1/usage) as a table, JSON or CSV."""

import argparse
import csv
import sys

from cli.client import Client
from cli.output import print_json, table

FIELDS = ("in_quota", "borrowed", "lent", "idle_held", "waiting")


def add_parser(sub) -> None:
    s = sub.add_parser("usage", help="GPU-hours per quota, workspace, user, GPU type or job")
    s.add_argument(
        "--by", choices=["quota", "workspace", "user", "gpu_type", "job"], default="quota"
    )
    s.add_argument("--since", help="ISO date or date-time, UTC (default: 30 days ago)")
    s.add_argument("--until", help="ISO date or date-time, UTC (default: now)")
    s.add_argument("--granularity", choices=["hour", "day", "month"], default="day")
    s.add_argument("--limit", type=int, help="--by job: jobs per page (default 100)")
    s.add_argument("--offset", type=int, help="--by job: jobs skipped, most used first")
    out = s.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--csv", action="store_true", help="GPU-seconds, one row per line")


def cmd_usage(client: Client, args: argparse.Namespace) -> int:
    data = client.get(
        "/usage",
        group_by=args.by,
        since=args.since,
        until=args.until,
        granularity=args.granularity,
        limit=args.limit,
        offset=args.offset,
    )
    if args.json:
        print_json(data, out=sys.stdout)
        return 0
    rows = data["rows"]
    if args.csv:
        names = ["group", "start", *(f"gpu_seconds_{f}" for f in FIELDS)]
        writer = csv.DictWriter(sys.stdout, fieldnames=names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return 0
    table(
        [
            (r["group"], r["start"], *(f"{r[f'gpu_seconds_{f}'] / 3600:.1f}" for f in FIELDS))
            for r in rows
        ],
        [args.by.upper(), "START (UTC)", "IN QUOTA", "BORROWED", "LENT", "IDLE", "WAITING"],
        out=sys.stdout,
    )
    print(f"GPU-hours, {data['since']} to {data['until']}, by {data['granularity']}")
    if data.get("next_offset") is not None:
        print(f"More jobs: --offset {data['next_offset']}")
    return 0
