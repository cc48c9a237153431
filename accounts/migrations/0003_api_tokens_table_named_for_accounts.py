"""ApiToken gets the accounts app's own table name (`accounts_apitoken`): its table kept
the name of the console app, which created it before accounts existed (console 0002 moved
only Django's state). A rename, on SQLite and PostgreSQL alike; no trigger or function
names this table."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_ratecounter"),
    ]

    operations = [
        migrations.AlterModelTable(name="apitoken", table=None),
    ]
