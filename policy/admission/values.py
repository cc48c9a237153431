"""Reading one submitted value of a job, plain: a page's strings or an API body's JSON types
in, the clean value out or a `Problem` with the messages a user sees.

`policy.jobspec` gives each field its reader (by kind: text, whole number, choice, flag,
environment) and, for a text, the field's own rule (`image`, `command`, `name`,
`checkpoint_dir` below). The wording of missing, too long, not a number and unknown choice
is Django's forms' own, so the page and the API say what they always said.

A text's length is the value's as submitted (the API's document says `maxLength` of what is
sent: docs/job-shape.md); it is then read without its surrounding whitespace.
"""

import re
from enum import StrEnum
from typing import Any

from policy.admission.env import EnvProblems, parse_env
from protocol import limits
from protocol.text import name_problem, text_problem

REQUIRED = "This field is required."
NOT_A_NUMBER = "Enter a whole number."
EMPTY = (None, "", [], (), {})
_DECIMAL = re.compile(r"\.0*\s*$")
_WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")
IMAGE = re.compile(limits.IMAGE_PATTERN)
# A checkpoint folder: plain path segments inside the job's workspace area.
CHECKPOINT_DIR = re.compile(limits.CHECKPOINT_FOLDER)
# What every text refuses (`text`), as a JSON Schema pattern.
NO_NUL = r"^[^\x00]*$"
# What `str.strip()` removes (the characters `str.isspace` calls whitespace), spelled out:
# JSON Schema's `\s` (ECMA-262's) is another set (it has U+FEFF, lacks U+001C-U+001F, U+0085).
WHITESPACE = r"[\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


def as_submitted(pattern: str | None) -> str:
    """The pattern a text matches as submitted (a JSON Schema `pattern`), from the one it
    matches once read: `text` reads it without surrounding whitespace, and refuses a NUL."""
    return rf"^{WHITESPACE}*(?:{pattern}){WHITESPACE}*$" if pattern else NO_NUL


class Problem(ValueError):
    def __init__(self, *messages: str) -> None:
        super().__init__(*messages)
        self.messages = list(messages)


# -- by kind ---------------------------------------------------------------------------------


def text(value: Any, *, required: bool = False, max_length: int | None = None) -> str:
    given = "" if value in EMPTY else str(value)
    messages = []
    if max_length is not None and len(given) > max_length:
        messages.append(
            f"Ensure this value has at most {max_length} characters (it has {len(given)})."
        )
    if "\x00" in given:
        messages.append("Null characters are not allowed.")
    if messages:
        raise Problem(*messages)
    read = given.strip()
    if not read and required:
        raise Problem(REQUIRED)
    return read


def whole_number(value: Any, label: str, bounds: tuple[int, int], default: int | None) -> Any:
    if value in EMPTY:
        return default
    low, high = bounds
    try:
        number = int(_DECIMAL.sub("", str(value)))
    except (ValueError, TypeError):
        raise Problem(NOT_A_NUMBER) from None
    if not low <= number <= high:
        raise Problem(f"{label} must be between {low} and {high}.")
    return number


def choice(value: Any, choices: type[StrEnum], default: StrEnum) -> str:
    read = "" if value in EMPTY else str(value)
    if read and read not in {v.value for v in choices}:
        raise Problem(f"Select a valid choice. {read} is not one of the available choices.")
    return read or default.value


def flag(value: Any) -> bool:
    return not (isinstance(value, str) and value.lower() in ("false", "0")) and bool(value)


def env(value: Any) -> dict[str, str]:
    try:
        return parse_env(value)
    except EnvProblems as exc:
        raise Problem(*exc.messages) from None


def data(value: Any) -> dict[str, str]:
    """Read-only data folders (docs/distributed.md): name → a folder of the workspace's
    area, written like an environment (an object, or name=folder lines)."""
    folders = env(value)
    problems = []
    if len(folders) > limits.DATA_MOUNTS:
        problems.append(f"At most {limits.DATA_MOUNTS} data folders.")
    for key, folder in folders.items():
        if not re.fullmatch(limits.DATA_NAME_PATTERN, key):
            problems.append(f"{key}: a data name is a letter, then letters, digits, '_' or '-'.")
            continue
        try:
            folders[key] = checkpoint_dir(folder)
        except Problem as exc:
            problems.extend(f"{key}: {message}" for message in exc.messages)
            continue
        if not folders[key]:
            problems.append(f"{key}: name a folder.")
    if problems:
        raise Problem(*problems)
    return folders


# -- a text field's own rule (after `text` has read it) ----------------------------------------


def image(read: str) -> str:
    if IMAGE.fullmatch(read):
        return read
    if _WHITESPACE_OR_CONTROL.search(read):
        raise Problem("An image reference cannot contain spaces.")
    raise Problem("An image reference is printable ASCII.")


def command(read: str) -> str:
    # Browsers submit a textarea with CRLF line endings; a shell would read each "\r" as
    # part of a word ("sleep: invalid time interval '4\r'").
    read = read.replace("\r\n", "\n").replace("\r", "\n").strip()
    if text_problem(read):
        raise Problem(f"The command {text_problem(read)}.")
    return read


def name(read: str) -> str:
    problem = name_problem(read)
    if problem:
        raise Problem(f"The name {problem}.")
    return read


def code_repo(read: str) -> str:
    if read and not re.fullmatch(limits.CODE_REPO_PATTERN, read):
        raise Problem("A repository is a git URL or a path, printable ASCII without spaces.")
    return read


def code_ref(read: str) -> str:
    if read and (not re.fullmatch(limits.CODE_REF_PATTERN, read) or ".." in read):
        raise Problem("A commit or branch is letters, digits, '.', '_', '-' and '/'.")
    return read


def checkpoint_dir(read: str) -> str:
    if read.startswith("/"):
        # Never silently turned into a relative one ("/etc" -> "etc"): say what it is.
        raise Problem(
            "Give a folder inside your workspace's checkpoint area (e.g. runs/exp1), "
            "not an absolute path."
        )
    folder = read.rstrip("/")
    if not folder:
        return ""
    parts = folder.split("/")
    if not CHECKPOINT_DIR.fullmatch(folder) or any(p in (".", "..") for p in parts):
        raise Problem("Use a relative folder of letters, digits, '.', '_' and '-' (no '..').")
    return folder


def default_name(image_ref: str) -> str:
    """A job name from its image: "nvcr.io/nvidia/pytorch:24.01-py3" → "pytorch"."""
    repository = image_ref.split("@", 1)[0].rsplit("/", 1)[-1]
    return repository.split(":", 1)[0] or "job"
