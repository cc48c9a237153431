"""The moved tables take their app's name (docs/usage-history.md)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0005_quotadecayedusage_moved_in'),
    ]

    operations = [
        migrations.AlterModelTable(
            name='quotadecayedusage',
            table=None,
        ),
    ]
