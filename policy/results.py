"""Counted results (docs/results.md): a job's work contract, the accepted units it is judged
on, and the verdict after exit 0. Pure: plain values in, plain values out.

A contract names its unit ("partition"), the units expected (a count, or ids: `p1,p2,…`
or `p{1..8}`) and optionally the items expected in total. After every worker exited 0:
all expected units accepted and no conflict → accepted; otherwise rejected with the code
`result_rejected` and a message saying what is missing. No contract: "result not checked".
"""

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policy.admission.values import Problem
from policy.secrets import redact_env
from protocol import limits
from protocol.words import plural as words_plural

REJECTED = "result_rejected"
ACCEPTED, RESULT_REJECTED, UNCHECKED, PENDING = "accepted", "rejected", "unchecked", "pending"
NOT_CHECKED = "result not checked"

_UNIT = re.compile(limits.RESULT_UNIT_PATTERN)
_RANGE = re.compile(r"^([A-Za-z0-9_.-]*)\{(\d{1,7})\.\.(\d{1,7})\}([A-Za-z0-9_.-]*)$")
_SPLIT = re.compile(r"[\s,]+")


# -- the contract as submitted ---------------------------------------------------------------


def expected_units(text: str) -> tuple[int | None, tuple[str, ...]]:
    """(count, ids) of a contract's expected units: "8" → (8, ()); "p1,p2" or "p{1..8}" →
    (n, the ids). Raises Problem when the text is neither."""
    text = (text or "").strip()
    if not text:
        return None, ()
    if text.isdigit():
        number = int(text)
        if not 1 <= number <= limits.RESULT_MAX_UNITS:
            raise Problem(f"Expected units must be between 1 and {limits.RESULT_MAX_UNITS}.")
        return number, ()
    ids: list[str] = []
    for part in _SPLIT.split(text):
        if not part:
            continue
        ids.extend(_expand(part))
        if len(ids) > limits.RESULT_MAX_UNITS:
            raise Problem(f"At most {limits.RESULT_MAX_UNITS} expected units.")
    if len(set(ids)) != len(ids):
        raise Problem("Expected units name a unit twice.")
    return len(ids), tuple(ids)


def _expand(part: str) -> list[str]:
    found = _RANGE.match(part)
    if found:
        prefix, low, high, suffix = found.groups()
        if int(low) > int(high) or int(high) - int(low) >= limits.RESULT_MAX_UNITS:
            raise Problem(f"{part}: a range runs from the lower number up.")
        width = len(low) if low.startswith("0") else 0
        return [f"{prefix}{n:0{width}d}{suffix}" for n in range(int(low), int(high) + 1)]
    if not _UNIT.match(part):
        raise Problem(
            f"{part[:40]!r}: a unit id is letters, digits, '.', '_' and '-' "
            "(a count, ids separated by commas, or a range like p{1..8})."
        )
    return [part]


def check_expected_units(read: str) -> str:
    """The job shape's rule for `result_expected_units` (policy.jobspec)."""
    expected_units(read)
    return read.strip()


def check_unit_name(read: str) -> str:
    if read and not re.fullmatch(r"[a-z][a-z _-]{0,39}", read):
        raise Problem("A unit name is a lower-case word, e.g. partition, shard, file.")
    return read


def check_inputs(read: str) -> str:
    """The job shape's rule for `result_inputs`: the declared inputs' version, one line."""
    read = (read or "").strip()
    if len(read) > limits.RESULT_INPUTS or any(c in read for c in "\r\n\x00"):
        raise Problem(
            f"The inputs' version is one line of at most {limits.RESULT_INPUTS} characters."
        )
    return read


@dataclass(frozen=True)
class Contract:
    unit: str = "unit"
    count: int | None = None
    ids: tuple[str, ...] = ()
    items: int | None = None
    per_unit: int | None = None  # items each unit must hold, exactly
    validator: str = ""  # a command run after exit 0 (docs/results.md, "The validator")

    @classmethod
    def of(cls, stored: Mapping[str, Any] | None) -> "Contract | None":
        """The contract a job's `result_contract` column holds, or None (no contract)."""
        stored = stored or {}
        keys = ("expected_units", "expected_items", "items_per_unit", "validator")
        if not any(stored.get(k) for k in keys):
            return None
        number, ids = expected_units(str(stored.get("expected_units") or ""))
        return cls(
            unit=stored.get("unit") or "unit",
            count=number,
            ids=ids,
            items=stored.get("expected_items"),
            per_unit=stored.get("items_per_unit"),
            validator=str(stored.get("validator") or ""),
        )

    @property
    def counted(self) -> bool:
        """Whether the contract expects units or items (not only a validator)."""
        return self.count is not None or self.items is not None or self.per_unit is not None

    def plural(self) -> str:
        return self.unit + ("es" if self.unit.endswith(("s", "x", "sh", "ch")) else "s")


# -- the verdict -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    state: str  # accepted | rejected | unchecked
    reason: str
    code: str = ""  # result_rejected when rejected
    missing: tuple[str, ...] = field(default_factory=tuple)


def _listed(ids: Iterable[str], limit: int = 10) -> str:
    ids = list(ids)
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def validator_problem(exit_code: int | None, output: str, reported: bool = True) -> str:
    """What a validator's outcome says is wrong ("" when it exited 0): "validator exited 3:
    <its last line>"."""
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
    if not reported:
        return "validator did not report (the agent may be too old to run it)"
    if exit_code == 0:
        return ""
    if exit_code is None:
        return f"validator not run: {last}" if last else "validator not run"
    return f"validator exited {exit_code}: {last}" if last else f"validator exited {exit_code}"


Outcome = tuple[int | None, str]  # a validator's (exit code, last lines)


def judge(
    contract: Contract | None,
    accepted: Mapping[str, int],
    conflicts: Iterable[str] = (),
    validator: Outcome | None = None,
) -> Verdict:
    """Every worker exited 0: is the result accepted? `accepted`: unit id → items;
    `validator`: its outcome when it reported (None: it did not)."""
    if contract is None:
        return Verdict(UNCHECKED, NOT_CHECKED)
    words = contract.plural()
    problems: list[str] = []
    missing: tuple[str, ...] = ()
    if contract.ids:
        missing = tuple(u for u in contract.ids if u not in accepted)
        if missing:
            problems.append(f"{words} {_listed(missing)} missing")
        extra = sorted(set(accepted) - set(contract.ids))
        if extra:
            problems.append(f"unexpected {words} {_listed(extra)}")
    elif contract.count is not None and len(accepted) < contract.count:
        problems.append(f"{len(accepted):,} of {contract.count:,} {words} accepted")
    items = sum(accepted.values())
    if contract.items is not None and items < contract.items:
        problems.append(f"{items:,} of {contract.items:,} items")
    if contract.per_unit is not None:
        other = sorted(u for u, n in accepted.items() if n != contract.per_unit)
        if other:
            held = _listed(f"{u} ({accepted[u]:,})" for u in other)
            problems.append(f"{words} not of {contract.per_unit:,} items: {held}")
    conflicts = sorted(set(conflicts))
    if conflicts:
        problems.append(f"conflicting checksums for {_listed(conflicts)}")
    if contract.validator:
        code, output = validator if validator is not None else (None, "")
        wrong = validator_problem(code, output, reported=validator is not None)
        if wrong:
            problems.append(wrong)
    if problems:
        return Verdict(
            RESULT_REJECTED,
            "exited 0 but result rejected: " + "; ".join(problems),
            REJECTED,
            missing,
        )
    expected = contract.count if contract.count is not None else len(accepted)
    said = [f"{len(accepted):,}/{expected:,} {words}", f"{items:,} items"]
    if contract.per_unit is not None:
        said[-1] += f", {contract.per_unit:,} each"
    if not contract.counted:
        said = []
    if contract.validator:
        said.append("validator ok")
    return Verdict(ACCEPTED, f"result accepted ({', '.join(said)})")


def progress_text(contract: Contract | None, accepted: int, items: int, phase: str = "") -> str:
    """ "phase write · 5 of 8 partitions accepted · 2,500 of 4,000 items" (what the job page,
    list, API and CLI show next to the step progress); "" when nothing is counted."""
    if contract is None and not accepted:
        return ""
    parts = [f"phase {phase}"] if phase else []
    unit = contract.unit if contract else "unit"
    plural = contract.plural() if contract else "units"
    if contract is not None and contract.count is not None:
        parts.append(f"{accepted:,} of {contract.count:,} {plural} accepted")
    else:
        parts.append(f"{words_plural(accepted, unit, plural)} accepted")
    if contract is not None and contract.items is not None:
        parts.append(f"{items:,} of {contract.items:,} items")
    else:
        parts.append(f"{items:,} items")
    return " · ".join(parts)


# -- run identity ----------------------------------------------------------------------------


def effective_config(values: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The whole resolved spec (defaults filled in, env redacted) and its sha256 over the
    canonical JSON (sorted keys, no spaces)."""
    config = {k: values[k] for k in sorted(values)}
    if isinstance(config.get("env"), Mapping):
        config["env"] = redact_env(config["env"])
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return config, hashlib.sha256(canonical.encode()).hexdigest()


def run_id(name: str, job_id: int) -> str:
    """A readable, unique run id: the job's name as a slug and its id (`campaign-a-1842`)."""
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "").lower()).strip("-")[:40].strip("-")
    return f"{slug or 'run'}-{job_id}"


def unit_digest(files: Iterable[Mapping[str, Any]]) -> str:
    """One checksum of a unit's files (paths, sizes, sha256; order-free): two reports of a
    unit are the same acceptance when their digests are equal."""
    rows = sorted((str(f["path"]), int(f["size"]), str(f["sha256"])) for f in files)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


# -- resuming a run --------------------------------------------------------------------------


def resume_refusal(run: str, run_inputs: str, inputs: str, carried: int, words: str) -> str:
    """Why a resume of run `run` (whose identity declared `run_inputs`) with the inputs
    `inputs` is refused, or "" when it may go on: the units accepted with other inputs
    (`carried` of them) would be mixed into a result of new inputs (docs/results.md,
    "Resume without duplicates")."""
    if not carried or (run_inputs or "") == (inputs or ""):
        return ""
    return (
        f"resume refused: the inputs changed since run {run} "
        f"({_inputs(run_inputs)} → {_inputs(inputs)}); "
        f"its {carried:,} accepted {words} were made from the old inputs. "
        "Start from scratch instead (from_scratch, or Restart from scratch on the job "
        "page): a new job in a folder of its own, nothing carried."
    )


def _inputs(version: str) -> str:
    return repr(version) if version else "none declared"


# -- a run that ended without a verdict -------------------------------------------------------

_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


def compact_units(ids: Iterable[str], parts: int = 12) -> str:
    """Unit ids as a reader scans them: consecutive numbers of one prefix as a range
    ("p1..p5, p7, shard-a", as a contract writes them), naturally sorted; past `parts`
    ranges, "… (N more)"."""
    numbered: dict[tuple[str, str], list[int]] = {}
    plain: list[str] = []
    for unit in set(ids):
        match = _NUMBERED.match(unit)
        if match and not (len(match[2]) > 1 and match[2].startswith("0")):
            numbered.setdefault((match[1], match[3]), []).append(int(match[2]))
        else:
            plain.append(unit)
    ranges: list[tuple[tuple, str]] = []
    for (prefix, suffix), numbers in numbered.items():
        numbers.sort()
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            text = f"{prefix}{start}{suffix}"
            if prev != start:
                text += f"..{prefix}{prev}{suffix}"
            ranges.append(((prefix, start, suffix), text))
            if n is not None:
                start = prev = n
    ranges += [((unit, -1, ""), unit) for unit in plain]
    ranges.sort(key=lambda r: r[0])
    shown = [text for _, text in ranges[:parts]]
    if len(ranges) > parts:
        shown.append(f"… ({len(ranges) - parts:,} more)")
    return ", ".join(shown)


def ended_unjudged(status: str, contract: Contract | None, units: Iterable[str]) -> str:
    """Why a run that ended without exit 0 (stopped, failed, preempted) has no verdict, and
    which of its units were whole when it ended: a graceful stop keeps whole units
    (agents.sdk.stop_requested) and a Restart carries them (docs/results.md)."""
    have = set(units)
    done = sorted(have)
    if contract is None and not done:
        return f"not judged: the job ended {status}"
    plural = contract.plural() if contract else "units"
    if not done:
        return f"not judged: the job ended {status} with no {plural} complete"
    text = (
        f"not judged: the job ended {status} with {len(done):,} {plural} complete "
        f"({compact_units(done)}); a Restart carries them"
    )
    if contract is not None and contract.ids:
        missing = [u for u in contract.ids if u not in have]
        if missing:
            text += f"; not done: {compact_units(missing)}"
    return text
