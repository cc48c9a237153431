"""A real `mpirun` job across two agents (docs/distributed.md, "MPI jobs"), run by
`make test-distributed`: the console (live server), two real agents with their own
addresses (127.0.0.2, 127.0.0.3) and port ranges, and a 2-worker `mpi` job whose launcher
(rank 0) runs Open MPI's mpirun; mpirun starts its daemons through the console's exec
channel on both workers (no ssh), and the C program's ranks all-reduce over TCP and print
which node ran them; then a rank fails on purpose, mpirun fails the launcher, fault
tolerance restarts the whole job, and attempt 2 (a new port, a new channel token) succeeds.

Skipped unless DISTRIBUTED_TEST=1 (the Makefile target sets it, and installs Open MPI
with scripts/mpi-tools) and Open MPI's mpirun and mpicc are on the PATH.
"""

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from jobs.actions.submit import JobSpec, create_job
from jobs.models import Job, Pod
from jobs.scheduler.cycle import run_cycle
from policy.statuses import JobStatus, PodStatus
from tests.agents.agentproc import agents, registered, stored_lines, wait_for  # noqa: F401

SOURCE = Path(__file__).with_name("allreduce_mpi.c")
RESULT = re.compile(
    r"RESULT rank=(\d+) world=(\d+) sum=(\d+) expected=(\d+) node=(\S+) allreduce=(\S+)s"
)
TIMEOUT = 240.0


def _mpi_missing() -> str:
    if os.environ.get("DISTRIBUTED_TEST") != "1":
        return "DISTRIBUTED_TEST=1 not set: `make test-distributed` runs this test"
    missing = [tool for tool in ("mpirun", "mpicc") if shutil.which(tool) is None]
    if missing:
        return f"Open MPI's {', '.join(missing)} missing: scripts/mpi-tools installs them"
    return ""


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.distributed,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(bool(_mpi_missing()), reason=_mpi_missing() or "ok"),
]


def test_mpirun_starts_ranks_on_both_agents_through_the_exec_channel(
    agents,  # noqa: F811 - the fixture
    researcher,
    workspace,
    quota,
    tmp_path,
):
    program = tmp_path / "allreduce_mpi"
    subprocess.run(["mpicc", "-O2", "-o", str(program), str(SOURCE)], check=True)
    ports = {"a": ("127.0.0.2", "31040-31049"), "b": ("127.0.0.3", "31050-31059")}
    for name, (address, span) in ports.items():
        agents(name, extra=("--advertise-address", address, "--rendezvous-ports", span))
    nodes = {name: registered(name) for name in ports}

    # Loopback only: both "nodes" are this host (docs/distributed.md, "MPI jobs").
    command = (
        'exec mpirun --host "$MPI_HOSTS" -np "$WORLD_SIZE" --mca btl tcp,self '
        f"--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo {program}"
    )
    job = create_job(
        user=researcher,
        workspace=workspace,
        quota=quota,
        spec=JobSpec(
            name="mpi-allreduce",
            image="openmpi:4",
            command=command,
            workers=2,
            gpus_per_worker=8,  # one worker per node
            cpus_per_worker=1,
            memory_gb_per_worker=1,
            env={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"},
            distributed={"framework": "mpi", "nproc_per_node": 1},
            fault_tolerance=True,
            ft_config={"policy": "OnFailure", "max_restarts": 2},
        ),
    )
    wait_for(
        lambda: run_cycle() or Pod.objects.filter(job=job).count() == 2,
        "the workers to be placed",
        timeout=TIMEOUT,
    )
    job.refresh_from_db()
    # Attempt 1's port, read while it is attempt 1's: read after the attempt ran, it was
    # sometimes attempt 2's already (the job restarts as soon as mpirun fails).
    assert job.rendezvous_attempt == 1
    first_port = job.rendezvous_port
    hosts = {n.pk: n.address for n in nodes.values()}
    placed = {p.rank: hosts[p.node_id] for p in Pod.objects.filter(job=job)}
    assert set(placed.values()) == {"127.0.0.2", "127.0.0.3"}  # across both agents

    first = _ran(job, 1, placed)
    assert any("failing on purpose" in line for line in first)

    # The launcher failed with mpirun: the whole job restarts and meets again.
    wait_for(
        lambda: run_cycle() or Pod.objects.filter(job=job, attempt=2).count() == 2,
        "attempt 2 to be placed",
        timeout=TIMEOUT,
    )
    with _explained(job):
        wait_for(
            lambda: Job.objects.get(pk=job.pk).status in (JobStatus.COMPLETED, JobStatus.FAILED),
            "the job to end",
            timeout=TIMEOUT,
        )
    job.refresh_from_db()
    pods = {p.rank: p for p in Pod.objects.filter(job=job, attempt=2)}
    assert job.status == JobStatus.COMPLETED, (job.status_reason, stored_lines(pods[0])[-40:])
    assert {p.status for p in pods.values()} == {PodStatus.SUCCEEDED}
    assert job.rendezvous_port != first_port
    placed = {p.rank: hosts[p.node_id] for p in pods.values()}
    _ran(job, 2, placed)
    all_running = max(p.started_at for p in pods.values())
    print(
        f"mpirun job, attempt 2: all workers Running → job ended "
        f"{(job.finished_at - all_running).total_seconds():.2f}s"
    )


def _ran(job: Job, attempt: int, placed: dict[int, str]) -> list[str]:
    """Both ranks of `attempt` all-reduced, each on its own worker's node: mpirun's daemons
    came through the channel. Returns the launcher's log."""

    def results():
        pods = {p.rank: p for p in Pod.objects.filter(job=job, attempt=attempt)}
        log = stored_lines(pods[0]) if 0 in pods else []
        found = {int(m[1]): m for line in log if (m := RESULT.search(line))}
        return (len(found) == 2 and pods[0].status != PodStatus.RUNNING) and (found, log, pods)

    with _explained(job):
        found, log, pods = wait_for(results, f"attempt {attempt}'s all-reduce", timeout=TIMEOUT)
    for match in found.values():  # mpirun gathers every rank's output: rank 0's log
        assert (match[2], match[3], match[4]) == ("2", "3", "3"), match[0]
    assert {found[r][5] for r in (0, 1)} == {placed[0], placed[1]}
    assert any("serving" in line for line in stored_lines(pods[1]))
    print(f"attempt {attempt}: all-reduce {max(float(m[6]) for m in found.values()):.3f}s")
    return log


@contextlib.contextmanager
def _explained(job: Job):
    """A wait that times out prints what every worker logged and the MPI processes still
    alive (mpirun, orted, the channel): where a run hung is then on record."""
    try:
        yield
    except pytest.fail.Exception:
        for pod in Pod.objects.filter(job=job).order_by("attempt", "rank"):
            lines = stored_lines(pod)[-40:]
            print(f"--- pod {pod.pk} attempt {pod.attempt} rank {pod.rank} {pod.status}: ---")
            print(*lines, sep="\n")
        ps = subprocess.run(["ps", "-wweo", "pid,ppid,etimes,stat,args"], capture_output=True)
        alive = [
            line for line in ps.stdout.decode().splitlines() if "mpi" in line or "orted" in line
        ]
        print("--- MPI processes alive ---", *alive, sep="\n")
        raise
