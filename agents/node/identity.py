"""What the agent resolves about a worker when it starts it (docs/results.md, run identity):
the executable and its sha256 (process runtime) or the image's id from the engine (docker),
the code version: `git rev-parse HEAD` of the folder of the program the command runs,
when that folder is in a repository. (The data folders' fingerprint: protocol.inputs.)"""

import contextlib
import logging
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from protocol.agent import RunFacts
from protocol.outputs import sha256_of

log = logging.getLogger(__name__)

INTERPRETERS = ("python", "python3", "bash", "sh", "node", "perl", "ruby", "Rscript")


def _program(command: str, path: str | None) -> tuple[str, str]:
    """(executable, program file): the command's first word on PATH, and the script an
    interpreter runs (`python train.py`), when it names an existing file."""
    try:
        words = shlex.split(command)
    except ValueError:
        return "", ""
    words = [w for w in words if "=" not in w.split("/")[0]]  # VAR=value prefixes
    if not words:
        return "", ""
    executable = shutil.which(words[0], path=path) or ""
    script = ""
    if Path(words[0]).name.startswith(INTERPRETERS):
        script = next((w for w in words[1:] if not w.startswith("-")), "")
        if not (script and os.path.isabs(script) and os.path.isfile(script)):
            script = ""
    return executable, script


def code_version(folder: str) -> str:
    if not folder:
        return ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "-C", folder, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        head = done.stdout.strip()
        if done.returncode == 0 and 7 <= len(head) <= 64:
            return head
    return ""


def process_facts(command: str, env: dict[str, str]) -> RunFacts:
    executable, script = _program(command, env.get("PATH"))
    target = script or executable
    digest = ""
    with contextlib.suppress(OSError):
        digest = sha256_of(Path(target)) if target else ""
    folder = str(Path(script).parent) if script else ""
    return RunFacts(
        executable=target[:1000],
        executable_sha256=digest,
        code_version=code_version(folder),
    )


def image_facts(image_id: str) -> RunFacts:
    return RunFacts(image_digest=image_id[:200])


def note_image(ledger: Any, runtime: Any, spec: Any) -> None:
    """The image's id as the engine resolved it (docker) into the worker's run facts; a
    runtime without images (process) has none. A failure is logged, never the launch's."""
    image_id = getattr(runtime, "image_id", None)
    if image_id is None:
        return
    try:
        ledger.note_facts(spec.pod_id, image_facts(image_id(spec.image)))
    except Exception as exc:
        log.warning("pod %s: cannot resolve image %s: %s", spec.pod_id, spec.image, exc)
