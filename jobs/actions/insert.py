"""One new row in one INSERT, without the ORM's per-statement compiler: the rows a single
submission writes (its job, its event, its audit entry; docs/processes.md, "Performance").

The statement's text is built once per model; each value is what `Model.save()` sends
(each field's `pre_save`, then `get_db_prep_save`), and the row's id comes back with
RETURNING (PostgreSQL, SQLite 3.35+). Unlike `save()` no `pre_save`/`post_save` signal is
sent: use it only for models no receiver listens to.
"""

from functools import cache

from django.db import connection
from django.db.models import Field, Model


@cache
def _statement(model: type[Model], vendor: str) -> tuple[str, tuple[Field, ...]]:
    meta = model._meta
    if not meta.pk.get_internal_type().endswith("AutoField"):
        raise TypeError(f"{meta.label}: the database does not pick its id")
    qn = connection.ops.quote_name
    fields = tuple(f for f in meta.concrete_fields if not f.primary_key)
    columns = ", ".join(qn(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = (  # names from the model, every value a parameter
        f"INSERT INTO {qn(meta.db_table)} ({columns}) VALUES ({marks}) "  # noqa: S608
        f"RETURNING {qn(meta.db_table)}.{qn(meta.pk.column)}"
    )
    return sql, fields


def insert_row[M: Model](obj: M) -> M:
    """Write the new `obj` (its id unset) and return it, saved: its id and the values its
    fields set on saving (`auto_now_add`) are on it."""
    sql, fields = _statement(type(obj), connection.vendor)
    params = [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        (pk,) = cursor.fetchone()
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias
    return obj
