"""A quota's decayed usage (historical fair share), moved here from `jobs`: state only, the
table `jobs_quotadecayedusage` exists."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0016_usagerollup_last_seconds"),
        ('quotas', '0004_tenant_historical_fair_share'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='QuotaDecayedUsage',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('quota_id', models.IntegerField(unique=True)),
                    ('at', models.DateTimeField()),
                    ('gpu_seconds', models.FloatField(default=0.0)),
                ],
                options={
                    'db_table': 'jobs_quotadecayedusage',
                },
            ),
            ],
            database_operations=[],
        ),
    ]
