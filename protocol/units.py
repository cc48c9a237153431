"""Accepted units of work and a worker's run facts as an agent reports them (docs/results.md;
part of the agent protocol, re-exported by `protocol.agent`)."""

from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
)

from protocol import limits
from protocol.base import ExitCode, Tail, Text, _FromAgent, _FromConsole
from protocol.text import text_problem

UnitId = Annotated[str, StringConstraints(pattern=limits.RESULT_UNIT_PATTERN)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


def _relative(value: str) -> str:
    if value.startswith("/") or any(part in ("", ".", "..") for part in value.split("/")):
        raise ValueError("a result file's path is relative, without '.', '..' or '//'")
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class UnitFile(_FromAgent):
    """One file of an accepted unit, relative to the run's result folder."""

    path: Annotated[
        str,
        StringConstraints(min_length=1, max_length=limits.RESULT_FILE_PATH),
        AfterValidator(_relative),
    ]
    size: Annotated[int, Field(ge=0, le=2**62)]
    sha256: Sha256


class UnitReport(_FromAgent):
    """A unit of work the program accepted (`OUTPUT_DIR/.accepted/<unit>.json`, docs/results.md)
    whose files the agent found on disk with the manifest's sizes and sha256. `conflict`: an
    earlier attempt accepted this unit with other checksums; the agent kept the first."""

    unit: UnitId
    items: Annotated[int, Field(ge=0, le=2**62)] = 0
    files: Annotated[list[UnitFile], Field(max_length=limits.RESULT_UNIT_FILES)] = []
    conflict: bool = False


class RunFacts(_FromAgent):
    """What the agent resolved when it started the worker (docs/results.md, run identity):
    the image's id from the engine (docker) or the executable and its sha256 (process), and
    the code version (`git rev-parse HEAD` of the working folder when it is a repository)."""

    image_digest: Text(200) = ""
    executable: Text(limits.PATH) = ""
    executable_sha256: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")] = ""
    code_version: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{7,64})?$")] = ""
    # The job's data folders as found on the node (protocol.inputs.inputs_facts): a
    # sha256 over each file's path, size and modification time, and how many files and bytes.
    inputs_fingerprint: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")] = ""
    inputs_files: Annotated[int, Field(ge=0)] = 0
    inputs_bytes: Annotated[int, Field(ge=0)] = 0
    # The data folders' content (WorkerSpec.hash_inputs): the sha256 of the manifest the
    # agent wrote before the start (protocol.inputs.content_facts); its files and bytes above.
    inputs_sha256: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")] = ""
    # The run's result folder on the node (where the console reads accepted files from,
    # when it shares the node's filesystem).
    result_dir: Annotated[str, StringConstraints(max_length=limits.PATH)] = ""

    @model_serializer(mode="wrap")
    def _inputs_only_when_found(self, handler: SerializerFunctionWrapHandler) -> dict:
        """The inputs' fields are additive: sent only when the job has data folders (an
        older console refuses an unknown field)."""
        data = handler(self)
        for key in ("inputs_fingerprint", "inputs_sha256"):
            if not data.get(key):
                data.pop(key, None)
        if "inputs_fingerprint" not in data and "inputs_sha256" not in data:
            data.pop("inputs_files", None)
            data.pop("inputs_bytes", None)
        return data


class ValidatorReport(_FromAgent):
    """The validator command's outcome (docs/results.md, "The validator"): its exit code
    (None: it could not be run or ran past its time limit; `output` says why) and its last
    lines."""

    exit_code: ExitCode | None = None
    output: Tail(limits.RESULT_VALIDATOR_OUTPUT) = ""


class ResumeIdentity(_FromConsole):
    """What a resumed run must still be (docs/results.md, "Resume without duplicates"): the
    run whose accepted units this attempt carries, and what the runtime resolved when that
    run first started. Sent only to a worker whose job carries accepted units."""

    run_id: Text(80) = ""
    carried: Annotated[int, Field(ge=1)] = 1  # accepted units that would be mixed in
    units: Text(40) = "units"  # the contract's plural ("partitions")
    code_version: str = ""
    executable_sha256: str = ""
    inputs_fingerprint: str = ""
    inputs_sha256: str = ""  # the data folders' content, when the job asked for it
    image_digest: str = ""  # compared by a runtime that resolves images (docker), after the pull


# What a resumed run compares, in the order a refusal names them.
RESUME_COMPARED = (
    ("code_version", "code version"),
    ("executable_sha256", "program (sha256)"),
    ("inputs_fingerprint", "data folders (fingerprint)"),
    ("inputs_sha256", "data folders (content sha256)"),
    ("image_digest", "image"),
)


def resume_refusal(expected: ResumeIdentity | None, facts: RunFacts) -> str:
    """Why this attempt may not resume the run it carries units of, or "" (also when either
    side does not know a value: only what both resolved is compared). Where both know the
    data folders' content sha256, their fingerprint is not compared: the same bytes copied
    without their times are the same inputs."""
    if expected is None:
        return ""
    by_content = bool(expected.inputs_sha256 and facts.inputs_sha256)
    changed = [
        f"{label} {_short(getattr(expected, key))} → {_short(getattr(facts, key))}"
        for key, label in RESUME_COMPARED
        if getattr(expected, key)
        and getattr(facts, key)
        and getattr(expected, key) != getattr(facts, key)
        and not (by_content and key == "inputs_fingerprint")
    ]
    if not changed:
        return ""
    return (
        f"resume refused: the {', '.join(changed)} changed since run {expected.run_id}; its "
        f"{expected.carried:,} accepted {expected.units} were made by the old one. Restart "
        "from scratch (a new job in a folder of its own, nothing carried), or restore it."
    )


def _short(value: str) -> str:
    return value.removeprefix("sha256:")[:12]  # an image id: its digest
