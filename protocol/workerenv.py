"""Variables the agent sets in every worker's environment (Django-free).

They say who the worker is (rank, job, attempt, the marker the agent finds its processes
by) and where its progress and checkpoints go; the agent overrides whatever a job's env
says. The console refuses them in a job's env (jobs.forms) so a stored job never claims a
value the worker will not see. `agents.node.runtimes.base.injected_env` sets them (a test
keeps the two lists together).
"""

WORKER_ENV = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "JOB_ID",
        "POD_ID",
        "ATTEMPT",
        "GPU_WORKER_ID",
        "PROGRESS_FILE",
        "CHECKPOINT_DIR",
        "OUTPUT_DIR",
        "ACCEPTED_UNITS_FILE",
    }
)


# What the console's rendezvous adds for every framework (policy.rendezvous.worker_env,
# docs/distributed.md); a framework's own (PET_*, TF_CONFIG, MPI_HOSTS) replace a job's
# value only when the job names that framework.
RENDEZVOUS_ENV = frozenset({"NNODES", "NODE_RANK", "NPROC_PER_NODE", "WORKER_ROLE"})


def is_worker_env(name: str) -> bool:
    return name in WORKER_ENV or name in RENDEZVOUS_ENV
