"""One field of the job's shape (docs/job-shape.md): its kind and everything said about it
once. `policy.jobspec.FIELDS` lists them; `policy.jobspec` re-exports these names."""

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from policy.admission import values


class Kind(StrEnum):
    REF = "ref"  # a quota or a workspace, by id or name (not stored as a value)
    TEXT = "text"
    INT = "int"  # a whole number within `bounds`
    CHOICE = "choice"  # one of `choices` (a StrEnum)
    FLAG = "flag"  # on or off
    ENV = "env"  # variables: an object of strings, or KEY=VALUE lines
    DATA = "data"  # read-only data folders: an object name → folder, or name=folder lines


@dataclass(frozen=True)
class JobField:
    """One field of a job, as every boundary reads, stores and shows it."""

    name: str  # the form's, the API's and the job file's name
    kind: Kind
    label: str  # the page's label; a number's bounds message names it too
    section: str = ""  # the create page's section that shows it (`PAGE`)
    help: str = ""  # the page's help text
    doc: str = ""  # the API document's description (a number's bounds are added to it)
    required: bool = False
    # What an empty value becomes. A text without one (None) must be given to a JobSpec.
    default: Any = None
    bounds: tuple[int, int] | None = None  # a number's, inclusive (protocol.limits)
    max_length: int | None = None  # a text's, as submitted (protocol.limits)
    # A regular expression a text matches once read (protocol.limits): what its own rule
    # (`check`) lets through, said in the API's document; the rule's messages say why not.
    pattern: str | None = None
    choices: type[StrEnum] | None = None
    check: Callable[[str], str] | None = None  # a text's own rule, once read
    # The job row's column ("": the field's name; "ft_config.<key>": a key of that JSON
    # column; None: not stored as a value, a reference).
    stored: str | None = ""
    # Where the API's JSON of a job shows it ("": the field's name; "<object>.<key>": a key
    # of that object; None: not by the shape).
    shown: str | None = ""
    cloned: bool = True  # a clone starts with the job's value (False: the default)
    worker: str = ""  # the worker spec's field carrying it (protocol.agent.JobRunSpec)
    rows: int = 0  # the page shows a text area of this many rows
    placeholder: str = ""

    def __post_init__(self) -> None:
        if not self.section:
            raise ValueError(f"{self.name}: every field is on the create page (its section)")
        if self.kind is Kind.INT and self.bounds is None:
            raise ValueError(f"{self.name}: a number needs its bounds (protocol.limits)")
        if self.kind is Kind.CHOICE and (self.choices is None or self.default is None):
            raise ValueError(f"{self.name}: a choice needs its choices and a default")
        implied = {Kind.FLAG: False, Kind.ENV: {}, Kind.DATA: {}}
        if self.default is None and self.kind in implied:
            object.__setattr__(self, "default", implied[self.kind])
        for place in ("stored", "shown"):
            if getattr(self, place) == "":
                object.__setattr__(self, place, self.name)

    def clean(self, value: Any) -> Any:
        """The value as submitted → the clean value, or `Problem` with its messages."""
        if self.kind in (Kind.REF, Kind.TEXT):
            read = values.text(value, required=self.required, max_length=self.max_length)
            return self.check(read) if self.check else read
        if self.kind is Kind.INT:
            return values.whole_number(value, self.label, self.bounds, self.default)
        if self.kind is Kind.CHOICE:
            return values.choice(value, self.choices, self.default)
        if self.kind is Kind.FLAG:
            return values.flag(value)
        if self.kind is Kind.DATA:
            return values.data(value)
        return values.env(value)
