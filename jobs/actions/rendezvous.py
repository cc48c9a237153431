"""Where an attempt's workers meet (docs/distributed.md): written by the scheduling cycle
as it places the attempt, in its transaction.

Each admitted job gets a port of the range rank 0's node lends, one no live job holds on
that node and not the job's previous one (an old rank 0 may still hold it), and each
rank's node address. A job holds its port while it is live; once final, the cycle gives
the port to others (the row keeps it, as a record). The cycle is the only writer and runs
one at a time, so two jobs never get one port.
"""

import logging
from collections.abc import Sequence

from django.db import connection
from django.db.models import Q
from django.utils.crypto import salted_hmac

from cluster.models import Node
from jobs.actions import bulk
from jobs.models import Job
from policy.rendezvous import choose_port
from policy.scheduler.model import Admission
from policy.statuses import ACTIVE_JOB_STATUSES

log = logging.getLogger(__name__)

_FIELDS = ("rendezvous_node", "rendezvous_port", "rendezvous_attempt", "rendezvous_hosts")
_RECORD = (
    ("job_id", "bigint"),
    ("node_id", "bigint"),
    ("port", "integer"),
    ("attempt", "integer"),
    ("hosts", "jsonb"),
)


def exec_token(job: Job) -> str:
    """The secret of an attempt's MPI exec channel (agents.node.mpi_exec): derived, not
    stored, so every worker of the attempt gets the same one and the next attempt another."""
    message = f"{job.pk}:{job.rendezvous_attempt or 1}"
    return salted_hmac("gpu-console.mpi-exec", message, algorithm="sha256").hexdigest()[:40]


def _address(node: Node) -> str:
    """Where peers reach a node: its recorded address, else its name."""
    return node.address or node.name


def _held(node_ids: set[int], job_ids: list[int]) -> tuple[dict[int, set[int]], dict[int, int]]:
    """One query: the ports live jobs other than these hold on these nodes, and these jobs'
    previous ports."""
    taken: dict[int, set[int]] = {n: set() for n in node_ids}
    previous: dict[int, int] = {}
    holding = Q(
        rendezvous_node_id__in=node_ids,
        rendezvous_port__isnull=False,
        status__in=list(ACTIVE_JOB_STATUSES),
    )
    rows = Job.objects.filter(holding | Q(pk__in=job_ids)).values_list(
        "pk", "rendezvous_node_id", "rendezvous_port"
    )
    chosen = set(job_ids)
    for job_id, node_id, port in rows:
        if job_id in chosen:
            if port is not None:
                previous[job_id] = port
        elif port is not None:
            taken[node_id].add(port)
    return taken, previous


def reserve(admitted: Sequence[Admission], attempts: dict[int, int]) -> int:
    """Record each admitted job's rendezvous for its attempt (`attempts`: job id → the
    attempt being placed). Two queries whatever the number of jobs, plus the update.
    Returns how many jobs got a port."""
    if not admitted:
        return 0
    node_ids = {p.node_id for a in admitted for p in a.placements}
    nodes = {
        n.pk: n
        for n in Node.objects.filter(pk__in=node_ids).only(
            "name", "address", "rendezvous_port_first", "rendezvous_port_last"
        )
    }
    job_ids = [a.job_id for a in admitted]
    masters = {a.job_id: min(a.placements, key=lambda p: p.rank).node_id for a in admitted}
    taken, previous = _held(set(masters.values()), job_ids)
    rows: list[tuple] = []
    for admission in admitted:
        master = nodes[masters[admission.job_id]]
        port = choose_port(
            master.rendezvous_port_first,
            master.rendezvous_port_last,
            taken[master.pk],
            previous.get(admission.job_id),
        )
        if port is None:
            log.warning(
                "node %s: no free rendezvous port for job %s", master.name, admission.job_id
            )
        else:
            taken[master.pk].add(port)
        ranked = sorted(admission.placements, key=lambda p: p.rank)
        hosts = [_address(nodes[p.node_id]) for p in ranked]
        rows.append((admission.job_id, master.pk, port, attempts[admission.job_id], hosts))
    _write(rows)
    return sum(1 for r in rows if r[2] is not None)


def _write(rows: list[tuple]) -> None:
    """One UPDATE joined on a row source (`jobs.actions.bulk`): `bulk_update`'s CASE per
    row and field cost 0.2 s of a 200-job cycle (bench/fleet_cycle.py --churn 200)."""
    qn = connection.ops.quote_name
    table = qn(Job._meta.db_table)
    col = {f: qn(Job._meta.get_field(f).column) for f in ("id", *_FIELDS)}
    for source, params in bulk.row_sources(_RECORD, rows):
        bulk.execute(
            f"UPDATE {table} SET {col['rendezvous_node']} = v.node_id, "  # noqa: S608
            f"{col['rendezvous_port']} = v.port, {col['rendezvous_attempt']} = v.attempt, "
            f"{col['rendezvous_hosts']} = v.hosts FROM {source} "
            f"WHERE {table}.{col['id']} = v.job_id",
            params,
        )
