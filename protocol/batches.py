"""The console's reading of an agent's requests, one item at a time (docs/agent-protocol.md). Pure.

A heartbeat is a batch of independent items (the node's facts, each GPU, each worker
report) and so is a log request (each worker's lines). Each item is validated on its own:
text is repaired by the schemas (protocol.agent.Text), and an item that still cannot be
read is refused alone, with a reason, never failing the others. Within a worker report the
details (progress, checkpoints, GPU use) are items too: a bad detail is dropped with a
reason and the report itself (running, exited, its exit code) still counts.

Only what concerns the whole request refuses it (raises RequestRefused → HTTP 400): a body
that is not an object, the node's own facts, more items than the limits allow.
"""

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from protocol import limits
from protocol.agent import (
    CheckpointReport,
    GpuReport,
    GpuUsage,
    LogLines,
    NodeFacts,
    ProgressReport,
    WorkerReport,
    error_reason,
)
from protocol.text import fit

DETAILS = {"progress": ProgressReport, "gpu": GpuUsage}


class RequestRefused(ValueError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass
class HeartbeatItems:
    facts: NodeFacts  # with the GPUs that could be read
    workers: list[WorkerReport] = field(default_factory=list)
    # pod id → why its report was refused (whole) or some details of it were dropped.
    refused: dict[int, str] = field(default_factory=dict)
    # GPU index → why its report was refused.
    refused_gpus: dict[int, str] = field(default_factory=dict)
    # Refused items that name no pod or GPU (logged by the console).
    unnamed: list[str] = field(default_factory=list)
    # Log lines riding along (`Heartbeat.logs`); None: the heartbeat carried none.
    logs: "LogItems | None" = None


@dataclass
class LogItems:
    batches: list[LogLines] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)
    unnamed: list[str] = field(default_factory=list)


def _id(item: Any, key: str, low: int, high: int) -> int | None:
    value = item.get(key) if isinstance(item, dict) else None
    return value if type(value) is int and low <= value <= high else None


def _list(data: dict, key: str, most: int, *, required: bool = False) -> list:
    value = data.get(key, None if required else [])
    if not isinstance(value, list):
        raise RequestRefused(f"{key} must be a list", key)
    if len(value) > most:
        raise RequestRefused(f"at most {most} items in {key}", key)
    return value


def _envelope(data: Any, allowed: set[str]) -> dict:
    if not isinstance(data, dict):
        raise RequestRefused("the body must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise RequestRefused(f"unknown field {unknown[0][:40]!r}", unknown[0][:40])
    return data


def parse_heartbeat(data: Any) -> HeartbeatItems:
    data = _envelope(data, {"facts", "workers", "logs"})
    raw_facts = data.get("facts")
    if not isinstance(raw_facts, dict):
        raise RequestRefused("facts must be an object", "facts")
    raw_gpus = _list(raw_facts, "gpus", limits.GPUS)
    try:
        facts = NodeFacts.model_validate({**raw_facts, "gpus": []})
    except ValidationError as exc:
        raise RequestRefused(f"facts: {error_reason(exc)}", "facts") from None
    items = HeartbeatItems(facts=facts)

    gpus: dict[int, GpuReport] = {}
    for position, raw in enumerate(raw_gpus):
        index = _id(raw, "index", 0, limits.GPUS - 1)
        try:
            gpu = GpuReport.model_validate(raw)
        except ValidationError as exc:
            _refuse_gpu(items, index, f"gpus.{position}: {error_reason(exc)}")
            continue
        if gpu.index in gpus:
            _refuse_gpu(items, gpu.index, f"GPU {gpu.index} is reported twice")
            continue
        gpus[gpu.index] = gpu
    items.facts = facts.model_copy(update={"gpus": list(gpus.values())})

    seen: set[int] = set()
    for position, raw in enumerate(_list(data, "workers", limits.WORKERS)):
        pod_id = _id(raw, "pod_id", 1, 2**62)
        report, problems = _worker(raw)
        if report is not None and report.pod_id in seen:
            report, problems = None, ["the pod is reported twice in one heartbeat"]
        if report is None:
            reason = fit("; ".join(problems), limits.REASON)
            if pod_id is None:
                items.unnamed.append(f"workers.{position}: {reason}")
            elif pod_id not in items.refused:
                items.refused[pod_id] = reason
            continue
        seen.add(report.pod_id)
        items.workers.append(report)
        if problems:
            items.refused[report.pod_id] = fit("; ".join(problems), limits.REASON)
    if data.get("logs"):
        items.logs = _log_items(_list(data, "logs", limits.STREAMS_PER_REQUEST), "logs")
    return items


def _refuse_gpu(items: HeartbeatItems, index: int | None, reason: str) -> None:
    if index is None:
        items.unnamed.append(reason)
    else:
        items.refused_gpus.setdefault(index, fit(reason, limits.REASON))


def _worker(raw: Any) -> tuple[WorkerReport | None, list[str]]:
    """A worker report with the details that could be read, and what was wrong."""
    if not isinstance(raw, dict):
        return None, ["a worker report must be an object"]
    core = {k: v for k, v in raw.items() if k not in DETAILS and k != "checkpoints"}
    try:
        report = WorkerReport.model_validate(core)
    except ValidationError as exc:
        return None, [error_reason(exc)]
    problems: list[str] = []
    details: dict[str, Any] = {}
    for name, model in DETAILS.items():
        if raw.get(name) is None:
            continue
        try:
            details[name] = model.model_validate(raw[name])
        except ValidationError as exc:
            problems.append(f"{name} dropped: {error_reason(exc)}")
    checkpoints = raw.get("checkpoints", [])
    if isinstance(checkpoints, list) and len(checkpoints) <= limits.CHECKPOINTS_REPORTED:
        kept = []
        for position, item in enumerate(checkpoints):
            try:
                kept.append(CheckpointReport.model_validate(item))
            except ValidationError as exc:
                problems.append(f"checkpoints.{position} dropped: {error_reason(exc)}")
        details["checkpoints"] = kept
    else:
        problems.append(f"checkpoints dropped: at most {limits.CHECKPOINTS_REPORTED} in a list")
    return report.model_copy(update=details), problems


def parse_log_batch(data: Any) -> LogItems:
    data = _envelope(data, {"batches"})
    return _log_items(_list(data, "batches", limits.STREAMS_PER_REQUEST, required=True), "batches")


def _log_items(raw_batches: list, key: str) -> LogItems:
    """Each worker's lines alone: a malformed item is refused by its pod id (or logged)."""
    items = LogItems()
    total = 0
    for position, raw in enumerate(raw_batches):
        pod_id = _id(raw, "pod_id", 1, 2**62)
        try:
            batch = LogLines.model_validate(raw)
        except ValidationError as exc:
            reason = error_reason(exc)
            if pod_id is None:
                items.unnamed.append(f"{key}.{position}: {reason}")
            else:
                items.refused.setdefault(pod_id, reason)
            continue
        total += len(batch.lines)
        if total > limits.LINES_PER_REQUEST:
            why = f"at most {limits.LINES_PER_REQUEST} lines per request"
            if key == "batches":
                raise RequestRefused(why)
            items.refused.setdefault(batch.pod_id, why)  # a heartbeat is never refused whole
            continue
        items.batches.append(batch)
    return items
