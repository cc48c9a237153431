"""No two live pods hold the same GPU of a node: a database rule, whatever the writer.

`jobs_heldgpu` has one row per GPU held by a live pod (Starting, Running, Unknown) and a
unique (node, GPU index); triggers on `jobs_pod` keep it, so an INSERT or UPDATE that would
put a second live pod on a held GPU fails with an IntegrityError and its transaction rolls
back. Pods going final (or deleted) release their GPUs in the same statement. No foreign
keys on `jobs_heldgpu`: the triggers are its only writers (see jobs.models.HeldGpu).

PostgreSQL: statement-level triggers with transition tables (one INSERT … SELECT per
statement, so a cycle placing ten thousand pods costs one extra statement, not ten
thousand); a concurrent second holder waits on the unique index and fails once the first
commits. SQLite: row triggers (its writers are serialised anyway).
"""

import django.db.models.deletion
from django.db import migrations, models


LIVE = "('Starting', 'Running', 'Unknown')"  # jobs.statuses.ACTIVE_POD_STATUSES, frozen here

MOVED = (
    f"(n.status IN {LIVE}) IS DISTINCT FROM (o.status IN {LIVE})"
    " OR n.node_id IS DISTINCT FROM o.node_id OR n.gpu_indices IS DISTINCT FROM o.gpu_indices"
)
POSTGRES = [
    f"""
    CREATE FUNCTION jobs_pod_hold_inserted_gpus() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO jobs_heldgpu (pod_id, node_id, gpu_index)
        SELECT p.id, p.node_id, g.value::integer
        FROM new_pods p CROSS JOIN LATERAL jsonb_array_elements_text(p.gpu_indices) AS g(value)
        WHERE p.node_id IS NOT NULL AND p.status IN {LIVE};
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION jobs_pod_hold_updated_gpus() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- Only pods whose liveness, node or GPUs changed: a heartbeat's UPDATE costs a join.
        DELETE FROM jobs_heldgpu h USING new_pods n JOIN old_pods o ON o.id = n.id
        WHERE h.pod_id = n.id AND ({MOVED});
        INSERT INTO jobs_heldgpu (pod_id, node_id, gpu_index)
        SELECT n.id, n.node_id, g.value::integer
        FROM new_pods n JOIN old_pods o ON o.id = n.id
        CROSS JOIN LATERAL jsonb_array_elements_text(n.gpu_indices) AS g(value)
        WHERE n.node_id IS NOT NULL AND n.status IN {LIVE} AND ({MOVED});
        RETURN NULL;
    END $$
    """,
    """
    CREATE FUNCTION jobs_pod_release_deleted_gpus() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM jobs_heldgpu h USING old_pods o WHERE h.pod_id = o.id;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER jobs_pod_releases_gpus_on_delete AFTER DELETE ON jobs_pod
    REFERENCING OLD TABLE AS old_pods
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_pod_release_deleted_gpus()
    """,
    """
    CREATE TRIGGER jobs_pod_holds_gpus_on_insert AFTER INSERT ON jobs_pod
    REFERENCING NEW TABLE AS new_pods
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_pod_hold_inserted_gpus()
    """,
    """
    CREATE TRIGGER jobs_pod_holds_gpus_on_update AFTER UPDATE ON jobs_pod
    REFERENCING OLD TABLE AS old_pods NEW TABLE AS new_pods
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_pod_hold_updated_gpus()
    """,
]
POSTGRES_REVERSE = [
    "DROP TRIGGER IF EXISTS jobs_pod_holds_gpus_on_insert ON jobs_pod",
    "DROP TRIGGER IF EXISTS jobs_pod_holds_gpus_on_update ON jobs_pod",
    "DROP TRIGGER IF EXISTS jobs_pod_releases_gpus_on_delete ON jobs_pod",
    "DROP FUNCTION IF EXISTS jobs_pod_release_deleted_gpus()",
    "DROP FUNCTION IF EXISTS jobs_pod_hold_inserted_gpus()",
    "DROP FUNCTION IF EXISTS jobs_pod_hold_updated_gpus()",
]

SQLITE = [
    f"""
    CREATE TRIGGER jobs_pod_holds_gpus_on_insert AFTER INSERT ON jobs_pod
    WHEN NEW.node_id IS NOT NULL AND NEW.status IN {LIVE}
    BEGIN
        INSERT INTO jobs_heldgpu (pod_id, node_id, gpu_index)
        SELECT NEW.id, NEW.node_id, value FROM json_each(NEW.gpu_indices);
    END
    """,
    f"""
    CREATE TRIGGER jobs_pod_holds_gpus_on_update AFTER UPDATE ON jobs_pod
    WHEN (NEW.status IN {LIVE}) IS NOT (OLD.status IN {LIVE})
      OR NEW.node_id IS NOT OLD.node_id
      OR NEW.gpu_indices IS NOT OLD.gpu_indices
    BEGIN
        DELETE FROM jobs_heldgpu WHERE pod_id = OLD.id;
        INSERT INTO jobs_heldgpu (pod_id, node_id, gpu_index)
        SELECT NEW.id, NEW.node_id, value FROM json_each(NEW.gpu_indices)
        WHERE NEW.node_id IS NOT NULL AND NEW.status IN {LIVE};
    END
    """,
]
SQLITE.append(
    """
    CREATE TRIGGER jobs_pod_releases_gpus_on_delete AFTER DELETE ON jobs_pod
    BEGIN
        DELETE FROM jobs_heldgpu WHERE pod_id = OLD.id;
    END
    """
)
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS jobs_pod_holds_gpus_on_insert",
    "DROP TRIGGER IF EXISTS jobs_pod_holds_gpus_on_update",
    "DROP TRIGGER IF EXISTS jobs_pod_releases_gpus_on_delete",
]

# The GPUs of pods already live (fails, and says which, if two already share a GPU).
BACKFILL = {
    "postgresql": f"""
        INSERT INTO jobs_heldgpu (pod_id, node_id, gpu_index)
        SELECT p.id, p.node_id, g.value::integer
        FROM jobs_pod p CROSS JOIN LATERAL jsonb_array_elements_text(p.gpu_indices) AS g(value)
        WHERE p.node_id IS NOT NULL AND p.status IN {LIVE}
    """,
    "sqlite": f"""
        INSERT INTO jobs_heldgpu (pod_id, node_id, gpu_index)
        SELECT p.id, p.node_id, g.value FROM jobs_pod p, json_each(p.gpu_indices) AS g
        WHERE p.node_id IS NOT NULL AND p.status IN {LIVE}
    """,
}


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    statements = {"postgresql": POSTGRES, "sqlite": SQLITE}.get(vendor)
    if statements is None:
        raise RuntimeError(f"no GPU-holding triggers for the {vendor} database")
    schema_editor.execute(BACKFILL[vendor])
    for sql in statements:
        schema_editor.execute(sql)


def uninstall(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for sql in {"postgresql": POSTGRES_REVERSE, "sqlite": SQLITE_REVERSE}.get(vendor, []):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0004_node_reregistration_consent"),
        ("jobs", "0007_text_fits_its_column_and_refused_reports"),
    ]

    operations = [
        migrations.CreateModel(
            name="HeldGpu",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("gpu_index", models.IntegerField()),
                (
                    "node",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="cluster.node",
                    ),
                ),
                (
                    "pod",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="jobs.pod",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("node", "gpu_index"), name="held_gpu_once_per_node"
                    )
                ],
            },
        ),
        migrations.RunPython(install, uninstall),
    ]
