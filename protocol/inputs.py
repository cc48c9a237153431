"""The fingerprint of a job's data folders (docs/results.md, "Run identity"): computed by
the node agent on its node before a start, and by the console's Kubernetes controller on
the shared checkpoint volume before it creates a Pod. Django-free."""

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from protocol import limits
from protocol.units import RunFacts


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
    for name in sorted(folders):
        root = Path(folders[name])
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for entry in sorted(names) + [d for d in dirs if (Path(folder) / d).is_symlink()]:
                path = Path(folder) / entry
                try:
                    st = path.lstat()
                    target = os.readlink(path) if path.is_symlink() else ""
                except OSError:
                    continue  # gone meanwhile, or unreadable: not part of the inputs
                files += 1
                if files > max_files:
                    return RunFacts(), (
                        f"data folders not fingerprinted: more than {max_files:,} files "
                        "(the run identity records no inputs fingerprint)"
                    )
                size += st.st_size if not target else 0
                shown = f"{name}/{path.relative_to(root).as_posix()}"
                line = f"{shown}\0{st.st_size}\0{int(st.st_mtime)}\0{target}\n"
                digest.update(line.encode(errors="surrogateescape"))
    facts = RunFacts(inputs_fingerprint=digest.hexdigest(), inputs_files=files, inputs_bytes=size)
    return facts, ""
