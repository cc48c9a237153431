"""The restart decision: given a job's fault-tolerance config, its counters and one failure,
what happens next. Pure.

Budgets (docs/traps.md "restart budgets"): only failures (a worker's exit the policy retries,
a hang with action restart) consume `max_restarts`; preemptions and lost nodes are counted
separately and never exhaust it. A node leaving (its agent shut down and stopped its
workers) is the platform's doing, never the job's: with fault tolerance it restarts like a
lost node; without, the job ends Stopped by the system with the reason (docs/fault-tolerance.md).
"""

from dataclasses import dataclass, field
from enum import StrEnum

from policy.faulttolerance.classify import DEFAULT_RULES, Rule, Verdict, classify


class RunType(StrEnum):
    SYNCHRONOUS = "Synchronous"
    ASYNCHRONOUS = "Asynchronous"


class RestartPolicy(StrEnum):
    ON_FAILURE = "OnFailure"
    EXIT_CODE_AND_ERROR_MSG = "ExitCodeAndErrorMsg"


class HangAction(StrEnum):
    RESTART = "restart"
    STOP = "stop"


class FailureKind(StrEnum):
    EXIT = "exit"  # a worker exited non-zero
    HANG = "hang"  # no progress for the hang timeout
    PREEMPTED = "preempted"  # resources reclaimed
    NODE_LOST = "node_lost"  # the worker's node missed heartbeats past the timeout
    NODE_LEFT = "node_left"  # the worker's node left: its agent stopped it while shutting down
    # The worker's node refused to start it (not enough free space for its output): a
    # node's condition, tried elsewhere without using the budget (docs/results.md).
    NODE_REFUSED = "node_refused"
    # The worker would resume a run whose code or program changed since its accepted units
    # were made: refused on every node, never retried (docs/results.md).
    RESUME_REFUSED = "resume_refused"


class Action(StrEnum):
    RESTART_JOB = "restart_job"  # a new attempt of every worker (back to Pending)
    RESTART_WORKER = "restart_worker"  # Asynchronous: only the failed worker restarts
    FAIL = "fail"  # end Failed
    STOP = "stop"  # end Stopped (hang action stop)
    END = "end"  # keep the status the failure led to (e.g. Preempted without AFT)


@dataclass(frozen=True)
class FtConfig:
    enabled: bool = False
    run_type: RunType = RunType.SYNCHRONOUS
    max_restarts: int = 3
    policy: RestartPolicy = RestartPolicy.EXIT_CODE_AND_ERROR_MSG
    hang_detection: bool = False
    hang_timeout: int = 1800
    hang_action: HangAction = HangAction.RESTART
    rules: tuple[Rule, ...] = field(default=DEFAULT_RULES, compare=False)

    @classmethod
    def from_job(cls, enabled: bool, config: dict) -> "FtConfig":
        """From `Job.fault_tolerance` and `Job.ft_config` (validated when the job was made)."""
        return cls(
            enabled=enabled,
            run_type=RunType(config.get("run_type", RunType.SYNCHRONOUS)),
            max_restarts=int(config.get("max_restarts", 3)),
            policy=RestartPolicy(config.get("policy", RestartPolicy.EXIT_CODE_AND_ERROR_MSG)),
            hang_detection=bool(config.get("hang_detection", False)),
            hang_timeout=int(config.get("hang_timeout", 1800)),
            hang_action=HangAction(config.get("hang_action", HangAction.RESTART)),
        )

    def to_dict(self) -> dict:
        return {
            "run_type": str(self.run_type),
            "max_restarts": self.max_restarts,
            "policy": str(self.policy),
            "hang_detection": self.hang_detection,
            "hang_timeout": self.hang_timeout,
            "hang_action": str(self.hang_action),
        }


@dataclass(frozen=True)
class Counters:
    failure_restarts: int = 0  # consume the budget
    preemptions: int = 0
    node_losses: int = 0


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    worker_rank: int | None = None
    exit_code: int | None = None
    message: str = ""  # error message and/or the last log lines


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str  # for the user: "restart 2/3: worker 0 exited 1, NCCL timeout"
    rule: str = ""  # the classification rule that matched, shown with the restart
    consumes_budget: bool = False
    backoff_seconds: float = 0.0
    exclude_node: bool = False  # retry elsewhere


# A crash loop backs off exponentially: 10 s, 20 s, 40 s … capped at 5 minutes.
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_CAP_SECONDS = 300.0


def backoff_for(failure_restarts: int) -> float:
    if failure_restarts <= 0:
        return 0.0
    return min(BACKOFF_BASE_SECONDS * 2 ** (failure_restarts - 1), BACKOFF_CAP_SECONDS)


def describe(failure: Failure) -> str:
    who = f"worker {failure.worker_rank}" if failure.worker_rank is not None else "the job"
    if failure.kind == FailureKind.EXIT:
        text = f"{who} exited {failure.exit_code}"
        first_line = failure.message.strip().splitlines()[-1:] if failure.message else []
        return f"{text}, {first_line[0][:200]}" if first_line else text
    if failure.kind == FailureKind.HANG:
        return f"{who} made no progress (hang detected)"
    if failure.kind == FailureKind.PREEMPTED:
        return f"preempted{': ' + failure.message if failure.message else ''}"
    if failure.kind == FailureKind.NODE_LEFT:
        return f"{who} stopped: its node left (the node's agent shut down)"
    if failure.kind == FailureKind.RESUME_REFUSED:
        line = failure.message.strip().splitlines()[-1:] if failure.message else []
        text = line[0].removeprefix("launch failed: ") if line else "resume refused"
        return f"{who} not started: {text[:600]}"
    if failure.kind == FailureKind.NODE_REFUSED:
        why = failure.message.strip().splitlines()[-1:] if failure.message else []
        return f"{who} not started: its node refused it" + (f" ({why[0][:300]})" if why else "")
    return f"{who} lost: node lost"


NOT_THE_JOBS = (FailureKind.PREEMPTED, FailureKind.NODE_LOST, FailureKind.NODE_LEFT)


def decide(config: FtConfig, counters: Counters, failure: Failure) -> Decision:
    what = describe(failure)
    if failure.kind == FailureKind.RESUME_REFUSED:
        return Decision(Action.FAIL, what)
    if failure.kind == FailureKind.NODE_REFUSED:
        # Never the job's fault, and never the same node again: each refusal excludes one
        # node, so the restarts are bounded by the cluster's nodes.
        if not config.enabled:
            return Decision(Action.FAIL, what)
        return Decision(Action.RESTART_JOB, f"restart elsewhere: {what}", exclude_node=True)
    if failure.kind in NOT_THE_JOBS:
        if not config.enabled:
            return _without_fault_tolerance(failure.kind, what)
        counted = (
            counters.preemptions + 1
            if failure.kind == FailureKind.PREEMPTED
            else counters.node_losses + 1
        )
        label = "preemption" if failure.kind == FailureKind.PREEMPTED else "node loss"
        # At once, however often: not the job's fault, and a delay would idle GPUs it could
        # use (docs/fault-tolerance.md, "Preempted jobs restart at once"). What once needed the
        # back-off, a borrower re-taking capacity its lender wants back, the scheduler's own
        # rules prevent: the reclaim cool-down per lender and the per-hour cap on victims.
        return Decision(Action.RESTART_JOB, f"restart after {label} {counted}: {what}")
    if failure.kind == FailureKind.HANG:
        if config.hang_action == HangAction.STOP:
            return Decision(Action.STOP, f"stopped: {what}", rule="hang")
        if not config.enabled:
            return Decision(Action.FAIL, what, rule="hang")
        return _budgeted(config, counters, what, rule="hang", exclude_node=False)
    if not config.enabled:
        return Decision(Action.FAIL, what)
    verdict, rule = classify(failure.exit_code, failure.message, config.rules)
    if verdict == Verdict.NO_RETRY:
        if config.policy == RestartPolicy.EXIT_CODE_AND_ERROR_MSG:
            return Decision(Action.FAIL, f"{what} (not retryable: {rule})", rule=rule)
        # OnFailure restarts it because every failure is restarted, not because of what the
        # classification found ("user error exit code" on a retry reads as a contradiction).
        rule = str(RestartPolicy.ON_FAILURE)
    return _budgeted(
        config,
        counters,
        what,
        rule=rule,
        exclude_node=verdict == Verdict.RETRY_ELSEWHERE,
    )


def _without_fault_tolerance(kind: FailureKind, what: str) -> Decision:
    """Preempted keeps its status; a lost node fails the job ("node lost"); a node that
    left (its agent shut down) stops it: Stopped by the system, never Failed."""
    if kind == FailureKind.PREEMPTED:
        return Decision(Action.END, what)
    if kind == FailureKind.NODE_LEFT:
        return Decision(Action.STOP, f"stopped by the system: {what}")
    return Decision(Action.FAIL, what)


def _budgeted(
    config: FtConfig, counters: Counters, what: str, *, rule: str, exclude_node: bool
) -> Decision:
    used = counters.failure_restarts + 1
    if used > config.max_restarts:
        return Decision(
            Action.FAIL,
            f"{what}; restart budget used up ({counters.failure_restarts}/{config.max_restarts})",
            rule=rule,
        )
    action = (
        Action.RESTART_WORKER if config.run_type == RunType.ASYNCHRONOUS else Action.RESTART_JOB
    )
    return Decision(
        action,
        f"restart {used}/{config.max_restarts}: {what}",
        rule=rule,
        consumes_budget=True,
        backoff_seconds=backoff_for(counters.failure_restarts),
        exclude_node=exclude_node,
    )


def config_of(job) -> FtConfig:
    """The fault-tolerance config of a job (anything with `fault_tolerance` and `ft_config`)."""
    return FtConfig.from_job(job.fault_tolerance, job.ft_config or {})
