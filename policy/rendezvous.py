"""How a job's workers meet (docs/distributed.md): the rendezvous port a node lends, each
worker's role, and the variables each worker gets for its framework. Pure: plain values in,
plain values out.

The console places every worker; when it admits an attempt it reserves a port on rank 0's
node (`choose_port`) and records each rank's node address. Every worker of that attempt
then gets `worker_env`: `MASTER_ADDR`/`MASTER_PORT` of rank 0, torchrun's `NNODES`,
`NODE_RANK`, `NPROC_PER_NODE` (and their `PET_*` forms, which torchrun reads as its
defaults), and per framework `TF_CONFIG` (TensorFlow) or the MPI host list.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Framework(StrEnum):
    GENERIC = "generic"  # RANK, WORLD_SIZE (workers), MASTER_ADDR/PORT: any launcher
    PYTORCH = "pytorch"  # torchrun: WORLD_SIZE counts processes, PET_* for torchrun
    MPI = "mpi"  # rank 0 is the launcher (mpirun --host $MPI_HOSTS), like MPIJob
    TENSORFLOW = "tensorflow"  # TF_CONFIG: chief, parameter servers, workers


class Role(StrEnum):
    MASTER = "master"
    WORKER = "worker"
    LAUNCHER = "launcher"
    CHIEF = "chief"
    PS = "ps"


@dataclass(frozen=True)
class Shape:
    """What the job says about its processes (policy.jobspec, `Job.distributed`)."""

    framework: str = Framework.GENERIC
    nproc_per_node: int = 0  # 0: one process per GPU, at least one
    ps_workers: int = 0  # TensorFlow: parameter servers after the chief
    gpus_per_worker: int = 0

    @property
    def nproc(self) -> int:
        return self.nproc_per_node or max(1, self.gpus_per_worker)


@dataclass(frozen=True)
class Meeting:
    """One attempt's rendezvous: each rank's node address and the port on rank 0's."""

    hosts: tuple[str, ...]
    port: int
    attempt: int


def choose_port(first: int, last: int, taken: set[int], previous: int | None) -> int | None:
    """A free port of a node's range, the one after `previous` first (round robin): a new
    attempt never reuses its last master port, which an old rank 0 may still hold. None:
    every port of the range is taken."""
    if last < first:
        return None
    size = last - first + 1
    start = 0 if previous is None or not first <= previous <= last else previous - first + 1
    for step in range(size):
        port = first + (start + step) % size
        if port not in taken:
            return port
    return None


def roles(shape: Shape, workers: int) -> tuple[str, ...]:
    """Each rank's role: rank 0 leads (master, launcher or chief); TensorFlow's parameter
    servers come right after the chief."""
    if workers < 1:
        return ()
    framework = shape.framework
    if framework == Framework.TENSORFLOW:
        ps = min(shape.ps_workers, workers - 1)
        return (Role.CHIEF, *([Role.PS] * ps), *([Role.WORKER] * (workers - 1 - ps)))
    lead = {Framework.PYTORCH: Role.MASTER, Framework.MPI: Role.LAUNCHER}.get(framework)
    if lead is None:
        return (Role.WORKER,) * workers
    return (lead, *([Role.WORKER] * (workers - 1)))


def role_counts(shape: Shape, workers: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for role in roles(shape, workers):
        counts[role] = counts.get(role, 0) + 1
    return counts


def _host(address: str) -> str:
    """An IPv6 literal in brackets where a port follows it."""
    return f"[{address}]" if ":" in address else address


def tf_config(shape: Shape, meeting: Meeting, rank: int) -> str:
    """TensorFlow's TF_CONFIG for `rank`: the cluster by role and this task. Two tasks on
    one node take consecutive ports from the master port on."""
    cluster: dict[str, list[str]] = {}
    index_of: list[int] = []
    seen: dict[str, int] = {}
    for role, address in zip(roles(shape, len(meeting.hosts)), meeting.hosts, strict=True):
        offset = seen.get(address, 0)
        seen[address] = offset + 1
        members = cluster.setdefault(str(role), [])
        index_of.append(len(members))
        members.append(f"{_host(address)}:{meeting.port + offset}")
    role = roles(shape, len(meeting.hosts))[rank]
    config = {"cluster": cluster, "task": {"type": str(role), "index": index_of[rank]}}
    return json.dumps(config, separators=(",", ":"))


def _slots(shape: Shape, hosts: Sequence[str]) -> dict[str, int]:
    slots: dict[str, int] = {}
    for address in hosts:
        slots[address] = slots.get(address, 0) + shape.nproc
    return slots


def mpi_hosts(shape: Shape, hosts: Sequence[str]) -> str:
    """`mpirun --host` form: each node once, with a slot per process of each worker on it."""
    return ",".join(f"{address}:{count}" for address, count in _slots(shape, hosts).items())


def hostfile(shape: Shape, hosts: Sequence[str]) -> str:
    """The same as an Open MPI hostfile ("host slots=N" lines)."""
    return "".join(f"{address} slots={n}\n" for address, n in _slots(shape, hosts).items())


def mpi_exec_role(hosts: Sequence[str], rank: int) -> str:
    """What worker `rank` of an MPI job runs (agents.node.mpi_exec): rank 0 the launcher,
    the first worker on each other node that node's server, every other one waits on its
    node's server (mpirun starts one daemon per node)."""
    if rank == 0:
        return "launcher"
    return "serve" if hosts.index(hosts[rank]) == rank else "follow"


def mpi_exec_env(meeting: Meeting, rank: int, token: str) -> dict[str, str]:
    """The exec channel of an MPI job's worker (docs/distributed.md, "MPI jobs"): every
    node's server listens on the attempt's port at its node's address."""
    hosts = meeting.hosts
    servers = [h for i, h in enumerate(hosts) if i and hosts.index(h) == i and h != hosts[0]]
    return {
        "MPI_EXEC_ROLE": mpi_exec_role(hosts, rank),
        "MPI_EXEC_ADDR": hosts[rank],
        "MPI_EXEC_PORT": str(meeting.port),
        "MPI_EXEC_SERVERS": ",".join(servers),
        "MPI_EXEC_TOKEN": token,
    }


def worker_env(shape: Shape, meeting: Meeting, rank: int, token: str = "") -> dict[str, str]:
    """The rendezvous variables of worker `rank` in this attempt (they override the job's
    env and the agent's defaults). `token`: the attempt's secret for an MPI job's exec
    channel (the console derives it; no MPI channel without it)."""
    nodes = len(meeting.hosts)
    nproc = shape.nproc
    processes = shape.framework in (Framework.PYTORCH, Framework.MPI)
    env = {
        "MASTER_ADDR": meeting.hosts[0],
        "MASTER_PORT": str(meeting.port),
        "RANK": str(rank),
        "WORLD_SIZE": str(nodes * nproc if processes else nodes),
        "NNODES": str(nodes),
        "NODE_RANK": str(rank),
        "NPROC_PER_NODE": str(nproc),
        "WORKER_ROLE": str(roles(shape, nodes)[rank]),
    }
    if shape.framework == Framework.PYTORCH:
        env.update(
            {
                "PET_NNODES": str(nodes),
                "PET_NODE_RANK": str(rank),
                "PET_NPROC_PER_NODE": str(nproc),
                "PET_MASTER_ADDR": meeting.hosts[0],
                "PET_MASTER_PORT": str(meeting.port),
                "PET_RDZV_ID": f"attempt-{meeting.attempt}",
                "TORCHELASTIC_RUN_ID": f"attempt-{meeting.attempt}",
            }
        )
    elif shape.framework == Framework.TENSORFLOW:
        env["TF_CONFIG"] = tf_config(shape, meeting, rank)
    elif shape.framework == Framework.MPI:
        env.update(
            {
                "MPI_HOSTS": mpi_hosts(shape, meeting.hosts),
                "MPI_LAUNCHER_RANK": "0",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "1",
            }
        )
        if token:
            env.update(mpi_exec_env(meeting, rank, token))
    return env


def shape_of(distributed: Mapping[str, Any] | None, gpus_per_worker: int) -> Shape:
    """A job's shape from its stored settings (`Job.distributed`; missing keys: defaults)."""
    settings = distributed or {}
    return Shape(
        framework=str(settings.get("framework") or Framework.GENERIC),
        nproc_per_node=int(settings.get("nproc_per_node") or 0),
        ps_workers=int(settings.get("ps_workers") or 0),
        gpus_per_worker=gpus_per_worker,
    )


def job_env(job: Any, rank: int, token: str = "") -> dict[str, str]:
    """Worker `rank`'s rendezvous variables from a job row (or anything with its
    attributes): empty until the cycle recorded a rendezvous that names this rank."""
    hosts = tuple(job.rendezvous_hosts or ())
    if job.rendezvous_port is None or not 0 <= rank < len(hosts):
        return {}
    meeting = Meeting(hosts=hosts, port=job.rendezvous_port, attempt=job.rendezvous_attempt or 1)
    return worker_env(shape_of(job.distributed, job.gpus_per_worker), meeting, rank, token)


def job_roles(job: Any) -> tuple[str, ...]:
    """Each rank's role for a job row (the page and the API group workers by it)."""
    return roles(shape_of(job.distributed, job.gpus_per_worker), job.workers)


def rendezvous_of(job: Any) -> dict[str, Any] | None:
    """What the page and the API show of the current rendezvous (None: none recorded)."""
    if job.rendezvous_port is None or not job.rendezvous_hosts:
        return None
    return {
        "master_addr": job.rendezvous_hosts[0],
        "master_port": job.rendezvous_port,
        "attempt": job.rendezvous_attempt,
        "hosts": list(job.rendezvous_hosts),
    }
