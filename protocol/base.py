"""The agent protocol's building blocks (docs/agent-protocol.md): bounded scalar types and
the two message bases (strict from an agent, lenient from the console). No Django imports."""

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from protocol import limits
from protocol.text import fit, fit_tail

# Mirrors quotas.models.ResourceType (kept Django-free; a test checks they agree).
ResourceTypeName = Literal["General-purpose", "Lingjun"]
# "simulated": workers are timers (agents.node.runtimes.simulated), for benchmarks.
RuntimeName = Literal["process", "docker", "simulated"]

NodeName = Annotated[
    str,
    StringConstraints(
        pattern=rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{limits.NODE_NAME - 1}}}$",
        max_length=limits.NODE_NAME,
    ),
]


def Text(limit: int):
    """Text an agent reports: repaired, never refused (NUL → ␀, lone surrogates → U+FFFD, cut
    to `limit` with "…"), so it always fits the column it is stored in."""
    return Annotated[str, AfterValidator(lambda value: fit(value, limit))]


def Tail(limit: int):
    """Like Text, but keeps the end (an error tail: its last lines say why)."""
    return Annotated[str, AfterValidator(lambda value: fit_tail(value, limit))]


EnvName = Annotated[str, StringConstraints(pattern=limits.ENV_NAME_PATTERN)]
EnvValue = Annotated[str, StringConstraints(max_length=limits.ENV_VALUE)]
PodId = Annotated[int, Field(ge=1, le=2**62)]
Attempt = Annotated[int, Field(ge=1, le=1_000_000)]
Seq = Annotated[int, Field(ge=0, le=2**62)]
ExitCode = Annotated[int, Field(ge=-1024, le=1024)]


class _FromAgent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _FromConsole(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# An agent's health mark: when it was set (ms since the epoch), so ids never repeat across
# agent restarts; 0 = no mark the operator can clear.
HealthMark = Annotated[int, Field(ge=0, le=2**62)]
Percent = Annotated[int, Field(ge=0, le=100)]
