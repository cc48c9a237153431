"""The moved tables take their app's name (docs/usage-history.md)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('usage', '0001_initial'),
    ]

    operations = [
        migrations.AlterModelTable(
            name='jobusagebucket',
            table=None,
        ),
        migrations.AlterModelTable(
            name='usagebucket',
            table=None,
        ),
        migrations.AlterModelTable(
            name='usagerollup',
            table=None,
        ),
        migrations.AlterModelTable(
            name='usagetotal',
            table=None,
        ),
    ]
