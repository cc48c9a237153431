"""Job and pod statuses and the transition table (docs/statuses.md). Pure: no Django imports."""

from enum import StrEnum


class JobStatus(StrEnum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"
    STARTING = "Starting"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"
    PREEMPTED = "Preempted"
    TERMINATED = "Terminated"


S = JobStatus
ACTIVE_JOB_STATUSES = frozenset({S.PENDING, S.INQUEUE, S.STARTING, S.RUNNING})
FINAL_JOB_STATUSES = frozenset({S.COMPLETED, S.FAILED, S.STOPPED, S.PREEMPTED, S.TERMINATED})
# Statuses of a job that waits for the scheduler (in its quota's queue or not yet seen).
WAITING_JOB_STATUSES = frozenset({S.PENDING, S.INQUEUE})
# Statuses that hold (or are about to hold) GPUs on nodes.
PLACED_JOB_STATUSES = frozenset({S.STARTING, S.RUNNING})

# Every allowed (from, to). Pending→Stopped is not in docs/statuses.md's list but a user must be
# able to stop a job the scheduler has not looked at yet (and a restart attempt waiting in
# Pending). The →Pending edges are Automatic Fault Tolerance restarts (a new attempt).
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.PENDING: frozenset({S.INQUEUE, S.STARTING, S.STOPPED, S.TERMINATED}),
    S.INQUEUE: frozenset({S.STARTING, S.STOPPED, S.TERMINATED}),
    S.STARTING: frozenset({S.RUNNING, S.FAILED, S.STOPPED, S.PREEMPTED, S.TERMINATED, S.PENDING}),
    S.RUNNING: frozenset({S.COMPLETED, S.FAILED, S.STOPPED, S.PREEMPTED, S.TERMINATED, S.PENDING}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset({S.PENDING}),
    S.STOPPED: frozenset(),
    S.PREEMPTED: frozenset({S.PENDING}),
    S.TERMINATED: frozenset(),
}


def is_allowed(from_status: JobStatus | str, to_status: JobStatus | str) -> bool:
    return JobStatus(to_status) in ALLOWED_TRANSITIONS[JobStatus(from_status)]


class PodStatus(StrEnum):
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Resource Preempted"
    STOPPED = "Stopped"
    TERMINATED = "Terminated"
    UNKNOWN = "Unknown"
    LOST = "Lost"


P = PodStatus
# A pod holds its GPUs until it reaches one of these (docs/simulator.md).
FINAL_POD_STATUSES = frozenset(
    {P.SUCCEEDED, P.FAILED, P.PREEMPTED, P.STOPPED, P.TERMINATED, P.LOST}
)
ACTIVE_POD_STATUSES = frozenset({P.STARTING, P.RUNNING, P.UNKNOWN})


class IdleResources(StrEnum):
    OFF = "Off"
    ACCEPTABLE = "Acceptable"
    ONLY = "Only Idle Resources"


class Actor(StrEnum):
    USER = "user"
    SCHEDULER = "scheduler"
    AGENT = "agent"
    MONITOR = "monitor"
    SYSTEM = "system"
