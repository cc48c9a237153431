"""Usage history's models, moved here from `jobs`: state only, the tables (`jobs_…`) exist."""

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("jobs", "0016_usagerollup_last_seconds"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='UsageRollup',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('rolled_until', models.DateTimeField(blank=True, null=True)),
                    ('ran_at', models.DateTimeField(blank=True, null=True)),
                    ('last_seconds', models.FloatField(default=0.0)),
                ],
                options={
                    'db_table': 'jobs_usagerollup',
                },
            ),
            migrations.CreateModel(
                name='UsageTotal',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('quota_id', models.IntegerField(unique=True)),
                    ('in_quota_us', models.BigIntegerField(default=0)),
                    ('borrowed_us', models.BigIntegerField(default=0)),
                    ('lent_us', models.BigIntegerField(default=0)),
                    ('idle_held_us', models.BigIntegerField(default=0)),
                    ('waiting_us', models.BigIntegerField(default=0)),
                ],
                options={
                    'db_table': 'jobs_usagetotal',
                },
            ),
            migrations.CreateModel(
                name='JobUsageBucket',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('span', models.CharField(max_length=1)),
                    ('start', models.DateTimeField()),
                    ('job_id', models.IntegerField()),
                    ('quota_id', models.IntegerField()),
                    ('workspace_id', models.IntegerField()),
                    ('user_id', models.IntegerField()),
                    ('gpu_type', models.CharField(blank=True, max_length=40)),
                    ('in_quota_us', models.BigIntegerField(default=0)),
                    ('borrowed_us', models.BigIntegerField(default=0)),
                    ('lent_us', models.BigIntegerField(default=0)),
                    ('idle_held_us', models.BigIntegerField(default=0)),
                    ('waiting_us', models.BigIntegerField(default=0)),
                ],
                options={
                    'db_table': 'jobs_jobusagebucket',
                    'constraints': [models.UniqueConstraint(fields=('span', 'start', 'job_id'), name='job_usage_unique')],
                },
            ),
            migrations.CreateModel(
                name='UsageBucket',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('span', models.CharField(max_length=1)),
                    ('start', models.DateTimeField()),
                    ('quota_id', models.IntegerField()),
                    ('workspace_id', models.IntegerField(default=0)),
                    ('user_id', models.IntegerField(default=0)),
                    ('gpu_type', models.CharField(blank=True, max_length=40)),
                    ('in_quota_us', models.BigIntegerField(default=0)),
                    ('borrowed_us', models.BigIntegerField(default=0)),
                    ('lent_us', models.BigIntegerField(default=0)),
                    ('idle_held_us', models.BigIntegerField(default=0)),
                    ('waiting_us', models.BigIntegerField(default=0)),
                ],
                options={
                    'db_table': 'jobs_usagebucket',
                    'indexes': [models.Index(condition=models.Q(('workspace_id', 0)), fields=['span', 'start', 'quota_id', 'workspace_id', 'in_quota_us', 'borrowed_us', 'lent_us', 'idle_held_us', 'waiting_us'], name='usage_bucket_quota_rows')],
                    'constraints': [models.UniqueConstraint(fields=('span', 'start', 'quota_id', 'workspace_id', 'user_id'), name='usage_bucket_unique')],
                },
            ),
            ],
            database_operations=[],
        ),
    ]
