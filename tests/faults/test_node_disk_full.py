"""A full disk leaves no empty temp files behind (issue 24, finding 8, the node's part).

The agent replaces its journals, its ledger and the workers' lease by writing a temp file
and renaming it. On a full disk the temp file was created, its write failed, and the empty
`*.tmp` stayed. A real small tmpfs is filled here (root can mount one; elsewhere skipped).
"""

import contextlib
import subprocess
from pathlib import Path

import pytest

from agents.node.fence import Lease
from agents.node.logship import LogShipper
from agents.node.logstream import LogStream
from agents.node.state import LaunchRecord, StateStore


@pytest.fixture
def node_full_disk(tmp_path) -> Path:
    """A 256 KiB tmpfs, filled to the last byte."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        fill(disk / "filler", 4096)
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(path: Path, chunk: int) -> None:
    """Write `path` until the disk is full."""
    with open(path, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"x" * chunk)


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


def test_a_journal_rewrite_on_a_full_disk_leaves_no_temp_file(node_full_disk, node_figures):
    node_figures.fault()
    stream = LogStream(pod_id=1, attempt=1, base=0, limit=1 << 20)
    stream.lines.extend(("x" * 100, 103, i) for i in range(200))
    stream.open_journal(node_full_disk / "1-1.jsonl")  # fails: the stream goes memory only
    assert temp_files(node_full_disk) == []
    assert len(stream.lines) == 200  # nothing lost: the lines are still held
    node_figures.survive()


def test_a_ledger_write_on_a_full_disk_leaves_no_temp_file(node_full_disk, node_figures):
    node_figures.fault()
    store = StateStore(node_full_disk)
    with pytest.raises(OSError):
        store.save_launched({i: LaunchRecord(attempt=1, error="e" * 400) for i in range(2000)})
    assert temp_files(node_full_disk) == []
    node_figures.survive()


def test_a_lease_renewal_on_a_full_disk_leaves_no_temp_file(node_full_disk, node_figures):
    node_figures.fault()
    # The tmpfs may still take a few bytes in its last page: fill even those.
    fill(node_full_disk / "crumbs", 1)
    with pytest.raises(OSError):
        Lease(node_full_disk).renew(123.0, 5.0)
    assert temp_files(node_full_disk) == []
    node_figures.survive()


def test_leftover_temp_journals_are_removed_at_start(tmp_path):
    (tmp_path / "3-1.jsonl.tmp").write_text("")
    (tmp_path / "4-2.jsonl.tmp").write_text('{"base": 0')
    assert LogShipper(lambda batch: None, journal_dir=tmp_path).recover() == {}
    assert temp_files(tmp_path) == []
