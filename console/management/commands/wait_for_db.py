"""`manage.py wait_for_db [--migrated]`: wait until the database accepts connections and,
with --migrated, until every migration is applied.

The compose stack's services run it before they start (migrate: the database; web, worker,
beat: the migrations too), so they come up right in whatever order an engine starts them,
whether or not it honours `depends_on` conditions, and after a database restore.
"""

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor


def unapplied_migrations() -> list[str]:
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


class Command(BaseCommand):
    help = "Wait until the database accepts connections (and, with --migrated, is migrated)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
        parser.add_argument(
            "--migrated", action="store_true", help="also wait until no migration is unapplied"
        )

    def handle(self, *args, timeout: float, migrated: bool, **options) -> None:
        deadline = time.monotonic() + timeout
        waiting_for = ""
        while True:
            try:
                connection.ensure_connection()
                pending = unapplied_migrations() if migrated else []
                if not pending:
                    self.stdout.write("database is up" + (" and migrated" if migrated else ""))
                    return
                waiting_for = f"{len(pending)} unapplied migration(s), first {pending[0]}"
            except DatabaseError as exc:
                waiting_for = f"database not reachable: {exc}".strip()
            connection.close()
            if time.monotonic() >= deadline:
                raise CommandError(f"gave up after {timeout:g}s: {waiting_for}")
            time.sleep(1)
