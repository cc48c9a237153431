"""The job's data folders as a run's inputs (docs/results.md, "Run identity"). Their
fingerprint: computed by the node agent on its node before a start, and by the console's
Kubernetes controller on the shared checkpoint volume before it creates a Pod. Their content
manifest (a job's `result_inputs_sha256`): every file's sha256, hashed off the loop by the
agent or the controller (protocol.hashing). Both walk the folders the same way. Django-free."""

import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from protocol import limits
from protocol.units import RunFacts

BLOCK = 1 << 20  # bytes read at a time while hashing


def _walk(folders: Mapping[str, str]) -> Iterator[tuple[str, Path, os.stat_result, str]]:
    """Every entry of the folders (name → folder on this node), folder by folder in name
    order: (its path under the folder's name, its path here, its lstat, a symbolic link's
    target text or ""). Links are not followed; an entry gone meanwhile is left out."""
    for name in sorted(folders):
        root = Path(folders[name])
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for entry in sorted(names) + [d for d in dirs if (Path(folder) / d).is_symlink()]:
                path = Path(folder) / entry
                try:
                    st = path.lstat()
                    target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
                except OSError:
                    continue  # gone meanwhile, or unreadable: not part of the inputs
                yield f"{name}/{path.relative_to(root).as_posix()}", path, st, target


def inputs_facts(
    folders: Mapping[str, str], max_files: int = limits.INPUT_FINGERPRINT_FILES
) -> tuple[RunFacts, str]:
    """The data folders' fingerprint (name → folder on this node): a sha256 over every
    entry's path (under the folder's name, so the same data elsewhere on another node gives
    the same value), size and modification time in whole seconds (kept by `cp -p` and
    `rsync -a`, unlike nanoseconds on some filesystems). Symbolic links count by their
    target's text and are not followed. Also a note for the job's log when the folders
    hold more than `max_files` entries: then nothing is fingerprinted (empty facts), as the
    walk runs in the agent's loop."""
    digest, files, size = hashlib.sha256(), 0, 0
    for shown, _path, st, target in _walk(folders):
        files += 1
        if files > max_files:
            return RunFacts(), (
                f"data folders not fingerprinted: more than {max_files:,} files "
                "(the run identity records no inputs fingerprint)"
            )
        size += st.st_size if not target else 0
        line = f"{shown}\0{st.st_size}\0{int(st.st_mtime)}\0{target}\n"
        digest.update(line.encode(errors="surrogateescape"))
    facts = RunFacts(inputs_fingerprint=digest.hexdigest(), inputs_files=files, inputs_bytes=size)
    return facts, ""


# -- the content manifest -----------------------------------------------------------------


@dataclass(frozen=True)
class InputFile:
    """One entry the manifest names: a regular file (hashed) or a symbolic link (its target's
    text hashed, not followed)."""

    shown: str  # its path under the folder's name: the manifest's name for it
    path: Path
    size: int  # 0 for a link
    target: str = ""  # a link's target text
    # What says an unchanged file has the same content (a cache's key): the change time
    # moves on any write or `touch`, even one that puts the modification time back.
    key: tuple[int, int, int, int] = (0, 0, 0, 0)  # size, mtime_ns, inode, ctime_ns


def content_files(
    folders: Mapping[str, str],
    max_files: int = limits.INPUT_SHA256_FILES,
    max_bytes: int = limits.INPUT_SHA256_BYTES,
) -> tuple[list[InputFile], str]:
    """What the manifest will name (the fingerprint's walk: files and links; pipes, sockets
    and devices have no content to hash and are left out), or nothing and a note for the
    job's log when the folders hold more than `max_files` entries or `max_bytes` bytes."""
    found: list[InputFile] = []
    size = 0
    for shown, path, st, target in _walk(folders):
        if not target and not stat.S_ISREG(st.st_mode):
            continue
        size += 0 if target else st.st_size
        found.append(
            InputFile(
                shown, path, 0 if target else st.st_size, target,
                (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns),
            )
        )  # fmt: skip
        if len(found) > max_files:
            return [], not_hashed(f"more than {max_files:,} files")
        if size > max_bytes:
            return [], not_hashed(f"more than {gb(max_bytes)}")
    return found, ""


def not_hashed(why: str) -> str:
    return f"data folders' content not hashed: {why} (the run identity records no content sha256)"


def gb(size: int) -> str:
    return f"{size / 10**9:,.1f} GB"


def link_sha256(target: str) -> str:
    return hashlib.sha256(target.encode(errors="surrogateescape")).hexdigest()


def file_sha256(path: Path, on_block: Callable[[int], None] = lambda _n: None) -> str:
    """A regular file's sha256, read without following a link or blocking on a pipe put in
    its place meanwhile (OSError then); `on_block(bytes read)` after each block may raise
    to stop."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is no longer a regular file")
        digest = hashlib.sha256()
        while block := f.read(BLOCK):
            digest.update(block)
            on_block(len(block))
    return digest.hexdigest()


def manifest(hashed: Iterable[tuple[str, str]]) -> bytes:
    """(path under the folder's name, sha256) → the manifest in `sha256sum`'s format, one
    `<sha256>  <path>` line each, sorted by path (as bytes). A name with a backslash or a
    line break is escaped as sha256sum does (the line then starts with a backslash)."""
    lines = []
    for name, digest in sorted(hashed, key=lambda h: h[0].encode(errors="surrogateescape")):
        if any(c in name for c in "\\\n\r"):
            escaped = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            lines.append(f"\\{digest}  {escaped}\n")
        else:
            lines.append(f"{digest}  {name}\n")
    return "".join(lines).encode(errors="surrogateescape")


def content_facts(text: bytes, files: list[InputFile]) -> RunFacts:
    """The run identity's content digest: the manifest's sha256, with its files and bytes."""
    return RunFacts(
        inputs_sha256=hashlib.sha256(text).hexdigest(),
        inputs_files=len(files),
        inputs_bytes=sum(f.size for f in files),
    )
