"""Pod.node now points at cluster.Node, and WorkerGpuSample moves here from the agents
app. Tables are unchanged (state only)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0001_initial"),
        ("jobs", "0003_job_excluded_nodes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="pod",
                    name="node",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="pods",
                        to="cluster.node",
                    ),
                ),
                migrations.CreateModel(
                    name="WorkerGpuSample",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("at", models.DateTimeField()),
                        ("gpus", models.PositiveSmallIntegerField()),
                        ("utilization", models.PositiveSmallIntegerField()),
                        ("memory_used_mb", models.PositiveIntegerField()),
                        (
                            "pod",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="gpu_samples",
                                to="jobs.pod",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "agents_workergpusample",
                        "ordering": ["pod", "at"],
                        "indexes": [models.Index(fields=["pod", "at"], name="gpu_sample_pod_at")],
                    },
                ),
            ],
        ),
    ]
