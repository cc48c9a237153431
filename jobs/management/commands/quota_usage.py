"""`manage.py quota_usage [--json]`: every quota's usage, the GPU pools and who borrows from
whom, from the scheduler's own snapshot (the numbers the dashboard and Quotas page show).
Quotas are listed in tree order, children indented under their parent; a tree's columns
(own guarantee, limit, subtree used/lent/borrowed) follow (docs/quota-tree.md "Accounting")."""

import json
from dataclasses import asdict

from django.core.management.base import BaseCommand

from jobs.forecast import current_snapshot
from policy.accounting import account, tree_order


class Command(BaseCommand):
    help = "Print quota usage, GPU pools and borrowing as the scheduler sees them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args, **options) -> None:
        acc = account(current_snapshot())
        quotas = [
            asdict(u) | {"free": u.free, "starved": u.starved}
            for u in tree_order(acc.quotas.values())
        ]
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "quotas": quotas,
                        "pools": [asdict(p) for p in acc.pools],
                        "borrows": [asdict(b) for b in acc.borrows],
                        "pooled_idle": [asdict(p) for p in acc.pooled_idle],
                    },
                    default=str,
                )
            )
            return
        self.stdout.write(
            f"{'quota':24} {'size':>5} {'used':>5} {'in q':>5} {'own idle':>8} {'lent':>5} "
            f"{'free':>5} {'borrowed':>8} {'waiting':>7} {'own':>5} {'limit':>5} "
            f"{'sub used':>8} {'sub lent':>8} {'sub borr':>8}"
        )
        for q in quotas:
            name = "  " * q["depth"] + q["name"]
            limit = "-" if q["max_gpus"] is None else q["max_gpus"]
            self.stdout.write(
                f"{name:24} {q['size']:5} {q['used']:5} {q['in_quota']:5} "
                f"{q['idle_own']:8} {q['lent']:5} {q['free']:5} {q['borrowed']:8} "
                f"{q['waiting']:7} {q['own']:5} {limit:>5} {q['subtree_used']:8} "
                f"{q['subtree_lent']:8} {q['subtree_borrowed']:8}"
                f"{'  starved' if q['starved'] else ''}"
            )
        for p in acc.pools:
            self.stdout.write(
                f"pool {p.resource_type} {p.gpu_type}: {p.in_use} in use, {p.free} free, "
                f"{p.unavailable} unavailable of {p.total}; guarantees {p.guaranteed}"
            )
