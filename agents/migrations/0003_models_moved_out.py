"""Node and GpuDevice moved to the cluster app, WorkerGpuSample to jobs. Their tables stay
as they are; only Django's state and the content types (admin history, permissions)
follow them."""

from django.db import migrations

MOVED = {"node": "cluster", "gpudevice": "cluster", "workergpusample": "jobs"}


def move_content_types(apps, schema_editor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        if ContentType.objects.filter(app_label=app_label, model=model).exists():
            ContentType.objects.filter(app_label="agents", model=model).delete()
        else:
            ContentType.objects.filter(app_label="agents", model=model).update(app_label=app_label)


def restore_content_types(apps, schema_editor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        ContentType.objects.filter(app_label=app_label, model=model).update(app_label="agents")


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0002_worker_gpu_samples"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("jobs", "0004_node_in_cluster_gpu_samples"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="WorkerGpuSample"),
                migrations.DeleteModel(name="GpuDevice"),
                migrations.DeleteModel(name="Node"),
            ],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
