"""Failure classification as data: an ordered list of rules, first match wins. Pure."""

import re
from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    RETRY = "retry"
    NO_RETRY = "no_retry"
    RETRY_ELSEWHERE = "retry_elsewhere"  # exclude the node for this job


@dataclass(frozen=True)
class Rule:
    name: str
    verdict: Verdict
    exit_codes: tuple[tuple[int, int], ...] = ()  # inclusive ranges; empty = any code
    pattern: str = ""  # regex searched in the error message / last log lines; "" = any

    def matches(self, exit_code: int | None, message: str) -> bool:
        if self.exit_codes and (
            exit_code is None or not any(lo <= exit_code <= hi for lo, hi in self.exit_codes)
        ):
            return False
        return not self.pattern or re.search(self.pattern, message, re.IGNORECASE) is not None


DEFAULT_RULES: tuple[Rule, ...] = (
    # The program failed its own short rehearsal (docs/results.md, "Before a long run"):
    # it would fail the same way again.
    Rule("preflight failed", Verdict.NO_RETRY, pattern=r"\[preflight\] failed"),
    Rule(
        "NCCL timeout",
        Verdict.RETRY,
        pattern=r"NCCL.*(timeout|timed out)|Watchdog caught collective operation timeout",
    ),
    Rule(
        "NCCL error", Verdict.RETRY, pattern=r"NCCL (error|WARN)|ncclInternalError|ncclSystemError"
    ),
    Rule("ECC error", Verdict.RETRY_ELSEWHERE, pattern=r"uncorrectable ECC|ECC error"),
    Rule("Xid error", Verdict.RETRY_ELSEWHERE, pattern=r"\bXid\b"),
    Rule(
        "CUDA error",
        Verdict.RETRY,
        pattern=r"CUDA error|CUBLAS_STATUS|cudaError|illegal memory access",
    ),
    Rule("lost node", Verdict.RETRY, pattern=r"node (lost|not reachable)|connection reset by peer"),
    Rule("OOM killed", Verdict.RETRY, exit_codes=((137, 137),)),
    Rule("SyntaxError", Verdict.NO_RETRY, pattern=r"\bSyntaxError\b"),
    Rule("ModuleNotFoundError", Verdict.NO_RETRY, pattern=r"\bModuleNotFoundError\b"),
    Rule("ImportError", Verdict.NO_RETRY, pattern=r"\bImportError\b"),
    Rule(
        "invalid arguments",
        Verdict.NO_RETRY,
        pattern=r"invalid (argument|choice)|unrecognized arguments|usage:",
    ),
    Rule("signal", Verdict.RETRY, exit_codes=((128, 255),)),
    Rule("user error exit code", Verdict.NO_RETRY, exit_codes=((1, 127),)),
)


def classify(
    exit_code: int | None, message: str, rules: tuple[Rule, ...] = DEFAULT_RULES
) -> tuple[Verdict, str]:
    """The verdict of the first matching rule, and its name. Unmatched failures retry."""
    for rule in rules:
        if rule.matches(exit_code, message):
            return rule.verdict, rule.name
    return Verdict.RETRY, "no rule matched"
