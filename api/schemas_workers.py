"""The API's shapes of a job's workers and of where they meet (docs/distributed.md); part
of `api.schemas`, which re-exports them."""

from typing import Any

from ninja import Schema
from pydantic import Field


class Progress(Schema):
    step: int
    total: int | None
    phase: str
    metrics: dict[str, Any]
    at: str | None


class Worker(Schema):
    rank: int
    attempt: int
    node: str | None
    gpu_indices: list[int]
    gpu_uuids: list[str]
    charged_quota: str
    in_quota: bool
    status: str
    status_reason: str
    exit_code: int | None
    progress: Progress | None
    report_refused: str = Field(
        description="The last report or log lines of this worker the console refused."
    )
    report_refused_at: str | None
    role: str = Field(
        "",
        description="The worker's role: master, launcher, chief, ps or worker.",
    )


class Rendezvous(Schema):
    """Where the current attempt's workers meet (docs/distributed.md)."""

    master_addr: str
    master_port: int
    attempt: int | None
    hosts: list[str] = Field(description="Each rank's node address, by rank.")
