"""A real `torch.distributed` job across two agents (docs/distributed.md), run by
`make test-distributed`: the console (live server), two real agents with their own
addresses (127.0.0.2, 127.0.0.3) and port ranges, and a 2-worker PyTorch job whose workers
(torchrun from `.venv-torch`, reading the console's PET_* variables) meet at rank 0's node
and all-reduce over gloo; then a worker fails, fault tolerance restarts the whole job, and
the new attempt meets again at its own rendezvous.

Skipped unless DISTRIBUTED_TEST=1 (the Makefile target sets it) and `.venv-torch` has torch:
the default `make test` does not install torch (about 200 MB).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from jobs.actions.submit import JobSpec, create_job
from jobs.models import Job, Pod
from jobs.scheduler.cycle import run_cycle
from policy.statuses import JobStatus, PodStatus
from tests.agents.agentproc import agents, registered, stored_lines, wait_for  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
TORCH = ROOT / ".venv-torch" / "bin"
PROGRAM = Path(__file__).with_name("allreduce.py")
RESULT = re.compile(
    r"RESULT rank=(\d+) world=(\d+) sum=(\S+) expected=(\S+) master=(\S+) attempt=(\d+) "
    r"started=(\S+) joined=(\S+)"
)
TIMEOUT = 240.0


def _torch_missing() -> str:
    if os.environ.get("DISTRIBUTED_TEST") != "1":
        return "DISTRIBUTED_TEST=1 not set: `make test-distributed` runs this test"
    python = TORCH / "python"
    if not python.exists():
        return f"{python} is missing: `make test-distributed` creates .venv-torch with torch"
    probe = subprocess.run([python, "-c", "import torch.distributed"], capture_output=True)
    if probe.returncode:
        return f"torch does not import in .venv-torch: {probe.stderr.decode()[-300:]}"
    return ""


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.distributed,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(bool(_torch_missing()), reason=_torch_missing() or "ok"),
]


def _results(job: Job, attempt: int) -> dict[int, re.Match]:
    found: dict[int, re.Match] = {}
    for pod in Pod.objects.filter(job=job, attempt=attempt):
        for line in stored_lines(pod):
            match = RESULT.search(line)
            if match:
                found[int(match[1])] = match
    return found


def _cycle_until(what, description: str):
    """Run scheduling cycles (a restart waits out its backoff) until `what` holds."""

    def step():
        run_cycle()
        return what()

    return wait_for(step, description, timeout=TIMEOUT)


def _met(job: Job, attempt: int) -> dict[int, re.Match]:
    """Both workers of `attempt` printed their all-reduce; checks it and prints the time
    from all workers Running (the console's start times) to rendezvous complete."""
    results = wait_for(
        lambda: len(r := _results(job, attempt)) == 2 and r, f"attempt {attempt}'s all-reduce"
    )
    pods = list(Pod.objects.filter(job=job, attempt=attempt))
    job.refresh_from_db()
    master = f"{job.rendezvous_hosts[0]}:{job.rendezvous_port}"
    for match in results.values():
        assert (match[2], match[3], match[4]) == ("2", "3", "3"), match[0]
        assert match[5] == master and match[6] == str(attempt), match[0]
    all_running = max(p.started_at for p in pods).timestamp()
    joined = max(float(m[8]) for m in results.values())
    print(
        f"attempt {attempt}: master {master}; all workers Running → rendezvous complete "
        f"{joined - all_running:.2f}s (program start → joined "
        f"{max(float(m[8]) - float(m[7]) for m in results.values()):.2f}s)"
    )
    return results


def test_two_agents_all_reduce_over_gloo_before_and_after_a_restart(
    agents,  # noqa: F811 - the fixture
    researcher,
    workspace,
    quota,
):
    ports = {"a": ("127.0.0.2", "31000-31009"), "b": ("127.0.0.3", "31010-31019")}
    for name, (address, span) in ports.items():
        agents(name, extra=("--advertise-address", address, "--rendezvous-ports", span))
    nodes = {name: registered(name) for name in ports}
    for name, node in nodes.items():
        assert node.address == ports[name][0]  # advertised, not the console's 127.0.0.1

    command = f"exec {TORCH}/torchrun {PROGRAM}"
    job = create_job(
        user=researcher,
        workspace=workspace,
        quota=quota,
        spec=JobSpec(
            name="ddp-gloo",
            image="pytorch:2",
            command=command,
            workers=2,
            gpus_per_worker=8,  # one worker per node
            cpus_per_worker=1,
            memory_gb_per_worker=1,
            env={"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
            distributed={"framework": "pytorch", "nproc_per_node": 1},
            fault_tolerance=True,
            ft_config={"policy": "OnFailure", "max_restarts": 2},
        ),
    )
    _cycle_until(lambda: Pod.objects.filter(job=job).count() == 2, "the workers to be placed")
    job.refresh_from_db()
    hosts = {n.pk: n.address for n in nodes.values()}
    placed = {p.rank: hosts[p.node_id] for p in Pod.objects.filter(job=job)}
    assert set(placed.values()) == {"127.0.0.2", "127.0.0.3"}  # across both agents
    assert job.rendezvous_hosts == [placed[0], placed[1]]
    first = _met(job, 1)
    first_port = job.rendezvous_port

    # Rank 1 failed on purpose: the whole job restarts as attempt 2 at a new rendezvous.
    _cycle_until(
        lambda: Pod.objects.filter(job=job, attempt=2).count() == 2, "attempt 2 to be placed"
    )
    second = _met(job, 2)
    assert job.rendezvous_port != first_port
    assert {m[5] for m in second.values()} != {m[5] for m in first.values()}
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED,
        "the job to complete",
        timeout=TIMEOUT,
    )
    assert set(Pod.objects.filter(job=job, attempt=2).values_list("status", flat=True)) == {
        PodStatus.SUCCEEDED
    }
