"""WorkerGpuSample gets the jobs app's own table name (`jobs_workergpusample`): its table
kept the name of the agents app, which created it (0004 moved only Django's state). A
rename, on SQLite and PostgreSQL alike; no trigger or function names this table."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_usage_models_moved_out"),
    ]

    operations = [
        migrations.AlterModelTable(name="workergpusample", table=None),
    ]
