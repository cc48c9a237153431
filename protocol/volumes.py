"""What workers write in their folders, read back (Django-free, docs/fault-tolerance.md):
the SDK's progress file and the manifests of committed checkpoints. The node agent reads
them on its node (`agents.node.progress`); the console's Kubernetes controller reads the
same files on the shared checkpoint volume (`kube.volumes`). Everything read here is the
job's output: hostile input, validated by the protocol schemas and dropped when invalid.
"""

import hashlib
import json
from pathlib import Path

from pydantic import ValidationError

from protocol import limits
from protocol.agent import CheckpointReport, ProgressReport

MAX_PROGRESS_BYTES = 16 * 1024
MAX_MANIFEST_BYTES = 1024 * 1024


def read_progress(path: Path) -> ProgressReport | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PROGRESS_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_PROGRESS_BYTES:
        return None
    try:
        body = json.loads(raw)
        return ProgressReport(
            step=body["step"],
            total=body.get("total"),
            phase=body.get("phase", ""),
            metrics=body.get("metrics") or {},
            at=body.get("time"),
        )
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError):
        return None


def _committed(folder: Path) -> CheckpointReport | None:
    manifest_path = folder / "manifest.json"
    try:
        if manifest_path.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        raw = manifest_path.read_bytes()
        manifest = json.loads(raw)
        total = 0
        for entry in manifest["files"]:
            name = Path(entry["name"])
            if name.is_absolute() or ".." in name.parts:
                return None
            if (folder / name).stat().st_size != entry["size"]:
                return None  # the files do not match the manifest: not committed
            total += entry["size"]
        return CheckpointReport(
            step=manifest["step"],
            path=str(folder),
            size_bytes=total + len(raw),
            checksum=hashlib.sha256(raw).hexdigest(),
            attempt=manifest.get("attempt") or None,
        )
    except (OSError, ValueError, KeyError, TypeError, ValidationError):
        return None


def scan_checkpoints(
    folder: Path, newest: int = limits.CHECKPOINTS_REPORTED
) -> list[CheckpointReport]:
    """The newest committed checkpoints in a job's folder, newest first."""
    try:
        entries = [e for e in Path(folder).iterdir() if e.name.startswith("step-") and e.is_dir()]
    except OSError:
        return []

    def step_of(entry: Path) -> int:
        suffix = entry.name[5:]
        return int(suffix) if suffix.isdigit() else -1

    found: list[CheckpointReport] = []
    for entry in sorted(entries, key=step_of, reverse=True):
        report = _committed(entry)
        if report is not None:
            found.append(report)
            if len(found) >= newest:
                break
    return found
