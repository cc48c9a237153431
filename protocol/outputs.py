"""A run's output folders, read and promoted (Django-free, docs/results.md).

Under the job's checkpoint folder: `output/job-<id>/attempt-N/` is attempt N's staging folder
(`OUTPUT_DIR`), `output/result/` the run's result folder (or the output folder the job
declared, on the same filesystem: `rename_problem`), and
`output/job-<id>/attempt-N.accepted.json` the units accepted before attempt N started
(`ACCEPTED_UNITS_FILE`). The program writes a
unit's files into its staging folder, then `.accepted/<unit>.json` = {"unit", "items",
"files": [{"path", "size", "sha256"}]} atomically. `promote` verifies each such manifest
against the files (regular files, sizes, sha256), then moves the files into the result
folder (rename: same filesystem) and writes the unit's manifest there; the staging manifest
is renamed `<unit>.json.promoted`. A unit the result folder already holds with the same
checksums is a no-op; with other checksums it is a conflict: the first stays, the staging
manifest becomes `<unit>.json.conflict`. A manifest whose files do not match is left for
the next scan (the program may still be writing) and never counts.

Everything read here is the job's output: hostile input, bounded and validated.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from protocol import limits
from protocol.agent import UnitFile, UnitReport

ACCEPTED = ".accepted"
MAX_UNIT_MANIFEST = 256 * 1024
_UNIT = re.compile(limits.RESULT_UNIT_PATTERN)


@dataclass(frozen=True)
class OutputPaths:
    staging: Path  # OUTPUT_DIR
    result: Path
    accepted_file: Path  # ACCEPTED_UNITS_FILE


def output_paths(
    checkpoint_folder: Path, job_id: int, attempt: int, result: Path | None = None
) -> OutputPaths:
    """A job's attempt's folders: `output/job-<id>/attempt-N/` stages, `output/result/` is
    the result folder, shared by the runs of one checkpoint folder (a Restart of a job uses
    its folder and carries its units: docs/results.md); `result`: the output folder the
    job declared instead (its Restarts share it)."""
    staging = Path(checkpoint_folder) / "output" / f"job-{job_id}" / f"attempt-{attempt}"
    return staging_paths(staging, result)


def staging_paths(staging: Path, result: Path | None = None) -> OutputPaths:
    """The paths that go with a staging folder (an adopted worker's, from workers.json);
    `result`: a declared output folder (None: `output/result/` beside the staging)."""
    staging = Path(staging)
    return OutputPaths(
        staging,
        Path(result) if result is not None else staging.parent.parent / "result",
        staging.with_name(staging.name + ".accepted.json"),
    )


def rename_problem(paths: OutputPaths) -> str:
    """Why units staged in `paths.staging` could not be promoted into `paths.result` by a
    rename ("": they can). Both folders must exist. A declared output folder on another
    filesystem (or another mount of the same one) than the checkpoint folder answers
    EXDEV: a copy would not be atomic, so the run is refused before it starts."""
    probe = paths.staging / f".rename-probe-{os.getpid()}"
    target = paths.result / probe.name
    try:
        probe.touch()
        os.rename(probe, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            probe.unlink()
        if exc.errno != errno.EXDEV:
            raise
        return (
            f"the output folder {paths.result} is on another filesystem than the staging "
            f"folder {paths.staging}: accepted units are moved into it by an atomic rename, "
            "which cannot cross filesystems; choose an output folder on the checkpoint "
            "folder's filesystem"
        )
    with contextlib.suppress(OSError):
        target.unlink()
    return ""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_unit(path: Path) -> UnitReport | None:
    """A unit manifest, validated (None: unreadable, too large, invalid)."""
    try:
        if path.stat().st_size > MAX_UNIT_MANIFEST:
            return None
        body = json.loads(path.read_bytes())
        report = UnitReport(
            unit=body["unit"],
            items=int(body.get("items") or 0),
            files=[UnitFile(**f) for f in body.get("files") or []],
        )
    except (OSError, ValueError, KeyError, TypeError, ValidationError):
        return None
    return report if all(_safe(f.path) for f in report.files) else None


def _safe(relative: str) -> bool:
    parts = Path(relative).parts
    return (
        not Path(relative).is_absolute()
        and ".." not in parts
        and bool(parts)
        and parts[0] != ACCEPTED
    )


def _matches(path: Path, entry: UnitFile) -> bool:
    """A regular file (not a link) with the manifest's size and sha256."""
    try:
        info = path.lstat()
    except OSError:
        return False
    if not path.is_file() or path.is_symlink() or info.st_size != entry.size:
        return False
    return sha256_of(path) == entry.sha256


def _verified(staging: Path, result: Path, unit: UnitReport) -> bool:
    """Every file in staging (or, after a promotion cut short, already in the result)."""
    for entry in unit.files:
        if not (_matches(staging / entry.path, entry) or _matches(result / entry.path, entry)):
            return False
    return True


def _digest(unit: UnitReport) -> str:
    rows = sorted((f.path, f.size, f.sha256) for f in unit.files)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def promote(paths: OutputPaths, attempt: int) -> list[UnitReport]:
    """Verify and promote the units staged since the last scan; returns them (conflicts
    included, marked), oldest manifest first."""
    folder = paths.staging / ACCEPTED
    try:
        staged = sorted(
            (e for e in folder.iterdir() if e.name.endswith(".json")),
            key=lambda e: (e.stat().st_mtime, e.name),
        )
    except OSError:
        return []
    found: list[UnitReport] = []
    for manifest in staged:
        unit = read_unit(manifest)
        if unit is None or manifest.name != f"{unit.unit}.json":
            continue
        if not _verified(paths.staging, paths.result, unit):
            continue  # still being written, or corrupt: never counts
        kept = read_unit(paths.result / ACCEPTED / manifest.name)
        if kept is not None:
            same = _digest(kept) == _digest(unit)
            os.replace(
                manifest, manifest.with_name(manifest.name + (".promoted" if same else ".conflict"))
            )
            if not same:
                found.append(unit.model_copy(update={"conflict": True}))
            continue
        _move_files(paths, unit)
        body = {**unit.model_dump(exclude={"conflict"}), "attempt": attempt}
        (paths.result / ACCEPTED).mkdir(parents=True, exist_ok=True)
        _write_atomic(paths.result / ACCEPTED / manifest.name, json.dumps(body).encode())
        os.replace(manifest, manifest.with_name(manifest.name + ".promoted"))
        found.append(unit)
    return found


def _move_files(paths: OutputPaths, unit: UnitReport) -> None:
    for entry in unit.files:
        source, target = paths.staging / entry.path, paths.result / entry.path
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)


def result_units(result: Path, attempt: int | None = None) -> list[dict]:
    """The units the result folder holds ({"unit", "items", "files", "attempt"}), of one
    attempt when given."""
    units = []
    with contextlib.suppress(OSError):
        for entry in sorted((Path(result) / ACCEPTED).iterdir()):
            if not entry.name.endswith(".json") or not _UNIT.match(entry.name[:-5]):
                continue
            with contextlib.suppress(OSError, ValueError):
                body = json.loads(entry.read_bytes()[:MAX_UNIT_MANIFEST])
                if attempt is None or body.get("attempt") == attempt:
                    units.append(body)
    return units


def promoted_units(paths: OutputPaths) -> list[UnitReport]:
    """The units this staging folder's attempt promoted (to report again after an agent
    restart: the console stores each once)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in sorted((paths.staging / ACCEPTED).iterdir()):
            if entry.name.endswith(".json.promoted"):
                unit = read_unit(paths.result / ACCEPTED / entry.name.removesuffix(".promoted"))
                if unit is not None:
                    found.append(unit)
    return found


def write_accepted_file(paths: OutputPaths) -> int:
    """ACCEPTED_UNITS_FILE for a new attempt: the units accepted so far, with checksums
    ({"units": {id: {"items", "files"}}}). Returns how many."""
    units = {
        u["unit"]: {"items": u.get("items", 0), "files": u.get("files", [])}
        for u in result_units(paths.result)
    }
    paths.accepted_file.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(paths.accepted_file, json.dumps({"units": units}).encode())
    return len(units)
