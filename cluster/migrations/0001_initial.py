"""Node and GpuDevice move from the agents app to cluster; their tables stay (state only)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("agents", "0002_worker_gpu_samples"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Node',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=200, unique=True)),
                        ('resource_type', models.CharField(choices=[('General-purpose', 'General-purpose'), ('Lingjun', 'Lingjun')], default='Lingjun', max_length=20)),
                        ('gpu_type', models.CharField(blank=True, max_length=40)),
                        ('gpus', models.PositiveIntegerField(default=0)),
                        ('cpus', models.PositiveIntegerField(default=0)),
                        ('memory_gb', models.PositiveIntegerField(default=0)),
                        ('state', models.CharField(choices=[('Ready', 'Ready'), ('NotReady', 'NotReady'), ('Lost', 'Lost')], default='Ready', max_length=10)),
                        ('cordoned', models.BooleanField(default=False, help_text='No new work is placed here')),
                        ('runtime', models.CharField(default='process', max_length=20)),
                        ('agent_version', models.CharField(blank=True, max_length=40)),
                        ('last_heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('heartbeat_deadline', models.DateTimeField(blank=True, null=True)),
                        ('token_prefix', models.CharField(blank=True, max_length=8, null=True, unique=True)),
                        ('token_digest', models.CharField(blank=True, max_length=64)),
                        ('token_revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'agents_node',
                        'indexes': [models.Index(condition=models.Q(('state', 'Ready')), fields=['heartbeat_deadline'], name='node_ready_deadline')],
                        'constraints': [models.CheckConstraint(condition=models.Q(('gpus__gte', 0)), name='node_gpus_non_negative')],
                    },
                ),
                migrations.CreateModel(
                    name='GpuDevice',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('index', models.PositiveIntegerField()),
                        ('uuid', models.CharField(blank=True, max_length=100)),
                        ('name', models.CharField(blank=True, max_length=100)),
                        ('memory_total_mb', models.PositiveIntegerField(default=0)),
                        ('memory_used_mb', models.PositiveIntegerField(default=0)),
                        ('utilization', models.PositiveSmallIntegerField(default=0)),
                        ('temperature', models.SmallIntegerField(blank=True, null=True)),
                        ('power_watts', models.FloatField(blank=True, null=True)),
                        ('ecc_errors', models.PositiveIntegerField(default=0)),
                        ('healthy', models.BooleanField(default=True)),
                        ('health_reason', models.CharField(blank=True, max_length=200)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='devices', to='cluster.node')),
                    ],
                    options={
                        'db_table': 'agents_gpudevice',
                        'ordering': ['node', 'index'],
                        'constraints': [models.UniqueConstraint(fields=('node', 'index'), name='gpu_unique_index_per_node')],
                    },
                ),
            ],
        ),
    ]
