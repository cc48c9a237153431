"""Pod.ended_by: who ended a worker when its exit does not tell ("agent_shutdown": its
node's agent stopped it while shutting down). SQLite rebuilds jobs_pod to add the column,
which drops its triggers: the GPU-holding triggers of 0008 are created again (as 0014)."""

import importlib

from django.db import migrations, models

remake = importlib.import_module("jobs.migrations.0014_pod_triggers_after_table_remake")


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0018_worker_gpu_samples_table_named_for_jobs"),
    ]

    operations = [
        migrations.AddField(
            model_name="pod",
            name="ended_by",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.RunPython(remake.reinstall, migrations.RunPython.noop),
    ]
