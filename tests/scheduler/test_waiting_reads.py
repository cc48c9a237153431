"""The snapshot's waiting jobs read incrementally (jobs.scheduler.waiting): whoever changes
a waiting job's row, and however (the ORM, a queryset update, raw SQL, twice in one
transaction), the next snapshot shows the row as it is; a snapshot after forgetting
everything is the same. On SQLite every read decodes every row: the same tests hold."""

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.actions.stop import request_stop
from jobs.models import Job
from jobs.scheduler import waiting
from jobs.scheduler.cycle import load_snapshot, run_cycle


def fresh_snapshot():
    waiting.forget()
    return load_snapshot(incremental=True)


def assert_same_as_fresh():
    snapshot, rows = load_snapshot(incremental=True)
    again, fresh_rows = fresh_snapshot()
    assert sorted(snapshot.jobs, key=lambda j: j.id) == sorted(again.jobs, key=lambda j: j.id)
    assert rows == fresh_rows
    return snapshot, rows


def test_every_kind_of_write_is_seen_by_the_next_snapshot(submit, node, researcher):
    jobs = [submit(name=f"j{i}", gpus=8) for i in range(4)]
    run_cycle()  # one admitted, three queued with reasons and positions
    first, rows = assert_same_as_fresh()
    assert len(first.jobs) == 3
    queued = [j for j in jobs if j.id in rows]

    # A raw UPDATE the ORM never saw, in the same transaction as the last read (the test
    # runs in one): the row's version still changes (a new command id).
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET priority = 9 WHERE id = %s", [queued[0].id])
    snapshot, _ = assert_same_as_fresh()
    assert {j.id: j.priority for j in snapshot.jobs}[queued[0].id] == 9
    # Twice in a row on the same job, each read in between.
    Job.objects.filter(id=queued[1].id).update(name="renamed")
    snapshot, _ = load_snapshot(incremental=True)
    assert {j.id: j.name for j in snapshot.jobs}[queued[1].id] == "renamed"
    Job.objects.filter(id=queued[1].id).update(name="renamed again", status_reason="by hand")
    snapshot, rows = assert_same_as_fresh()
    assert {j.id: j.name for j in snapshot.jobs}[queued[1].id] == "renamed again"
    assert rows[queued[1].id].status_reason == "by hand"
    # A stop takes a job out of the queue; a new job joins it.
    request_stop(queued[2], user=researcher)
    late = submit(name="late", gpus=8)
    snapshot, rows = assert_same_as_fresh()
    assert set(rows) == {queued[0].id, queued[1].id, late.id}
    # A restart backing off leaves the queue until its time has come.
    Job.objects.filter(id=late.id).update(
        restart_not_before=timezone.now() + timezone.timedelta(minutes=5)
    )
    _, rows = assert_same_as_fresh()
    assert late.id not in rows


def test_a_second_read_decodes_only_the_rows_that_changed(submit, node):
    jobs = [submit(name=f"j{i}", gpus=8) for i in range(6)]
    waiting.forget()
    load_snapshot(incremental=True)
    Job.objects.filter(id=jobs[3].id).update(priority=5)
    with CaptureQueriesContext(connection) as queries:
        snapshot, _ = load_snapshot(incremental=True)
    assert {j.id: j.priority for j in snapshot.jobs}[jobs[3].id] == 5
    row_reads = [q["sql"] for q in queries.captured_queries if "status_reason" in q["sql"]]
    if connection.vendor == "postgresql":
        # The versions of all six, then the one changed row.
        [read] = row_reads
        assert f"IN ({jobs[3].id})" in read
    else:
        assert len(row_reads) == 1  # the whole queue, as before
