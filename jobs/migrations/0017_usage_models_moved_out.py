"""Usage history's models moved to the `usage` app, the decayed usage to `quotas`: state
only, the tables keep their names (docs/usage-history.md)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("quotas", "0005_quotadecayedusage_moved_in"),
        ("usage", "0001_initial"),
        ('jobs', '0016_usagerollup_last_seconds'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.RemoveConstraint(
                model_name='jobusagebucket',
                name='job_usage_unique',
            ),
            migrations.DeleteModel(
                name='JobUsageBucket',
            ),
            migrations.DeleteModel(
                name='QuotaDecayedUsage',
            ),
            migrations.RemoveIndex(
                model_name='usagebucket',
                name='usage_bucket_quota_rows',
            ),
            migrations.RemoveConstraint(
                model_name='usagebucket',
                name='usage_bucket_unique',
            ),
            migrations.DeleteModel(
                name='UsageBucket',
            ),
            migrations.DeleteModel(
                name='UsageRollup',
            ),
            migrations.DeleteModel(
                name='UsageTotal',
            ),
            ],
            database_operations=[],
        ),
    ]
