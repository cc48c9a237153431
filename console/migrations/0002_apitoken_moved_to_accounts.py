"""ApiToken moved to the accounts app: its table stays; the state and the content type
(admin history, permissions) follow it."""

from django.db import migrations


def move_content_type(apps, schema_editor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    if ContentType.objects.filter(app_label="accounts", model="apitoken").exists():
        ContentType.objects.filter(app_label="console", model="apitoken").delete()
    else:
        ContentType.objects.filter(app_label="console", model="apitoken").update(
            app_label="accounts"
        )


def restore_content_type(apps, schema_editor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="accounts", model="apitoken").update(
        app_label="console"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("console", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ApiToken")],
        ),
        migrations.RunPython(move_content_type, restore_content_type),
    ]
