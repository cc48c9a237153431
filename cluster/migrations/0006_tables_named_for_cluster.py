"""Node and GpuDevice get the cluster app's own table names (`cluster_node`,
`cluster_gpudevice`): their tables kept the names of the agents app, which created them
before cluster existed (0001 moved only Django's state).

A rename, on SQLite and PostgreSQL alike: the rows, indexes and constraints stay, and the
foreign keys pointing here (`jobs_pod.node_id`, …) follow the table. No trigger or function
names these tables (the GPU-holding triggers of jobs 0008 are on `jobs_pod` and
`jobs_heldgpu`). Raw SQL in the code takes the name from the model (`Node._meta.db_table`).
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0005_node_report_digest"),
    ]

    operations = [
        migrations.AlterModelTable(name="node", table=None),
        migrations.AlterModelTable(name="gpudevice", table=None),
    ]
