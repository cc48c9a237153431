"""A job's code, checked out by the agent before its worker starts (docs/distributed.md).

`code_repo` is a git repository the node can reach (a URL or a local path), `code_ref` a
commit or a branch (empty: the repository's default branch). Each worker attempt gets its
own checkout, `<state dir>/code/pod-<id>-<attempt>`, at the commit the ref names at start;
the worker finds it in CODE_DIR and the commit in CODE_COMMIT, and its log records the
commit. A checkout that fails fails the launch with git's reason.
"""

import re
import shutil
import subprocess
from pathlib import Path

GIT_TIMEOUT = 300.0
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


class CheckoutFailed(ValueError):
    """The job's code could not be checked out on this node."""


def _git(*args: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            env={"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CheckoutFailed(f"git {args[0]}: {exc}") from None
    if done.returncode:
        raise CheckoutFailed(f"git {args[0]}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def checkout(state_dir: Path, pod_id: int, attempt: int, repo: str, ref: str) -> tuple[Path, str]:
    """Clone `repo` and check out `ref` (a branch resolves to its commit now); returns the
    folder and the commit. Raises CheckoutFailed."""
    if ref and (not _REF.match(ref) or ".." in ref):
        raise CheckoutFailed(f"not a commit or branch: {ref!r}")
    folder = Path(state_dir) / "code" / f"pod-{pod_id}-{attempt}"
    if folder.exists():  # a launch retried after a crash: start again
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _git("clone", "--quiet", "--no-checkout", "--", repo, str(folder))
    _git("checkout", "--quiet", "--detach", ref or "HEAD", "--", cwd=folder)
    return folder, _git("rev-parse", "HEAD", cwd=folder)
