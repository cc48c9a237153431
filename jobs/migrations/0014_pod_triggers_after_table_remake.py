"""SQLite rebuilds a table to add a column (0012 added two to jobs_pod), and the rebuild
drops the table's triggers: the GPU-holding triggers of 0008 are created again here. On
PostgreSQL an added column keeps its triggers, so nothing is done there."""

import importlib

from django.db import migrations

held = importlib.import_module("jobs.migrations.0008_pods_hold_distinct_gpus")


def reinstall(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for sql in held.SQLITE_REVERSE:
        schema_editor.execute(sql)
    for sql in held.SQLITE:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0013_usage_history")]

    operations = [migrations.RunPython(reinstall, migrations.RunPython.noop)]
