"""A number of GPUs is written by one rule ("1 GPU", "2 GPUs"; `protocol.words`, or
`GPU{{ n|pluralize }}` in a template): no code or template writes a placeholder followed by
a fixed "GPUs" (which reads "1 GPUs"), nor "GPU(s)"."""

import re
import subprocess

import pytest

from protocol.words import gpu_noun, gpus, plural
from tests.architecture.rules import ROOT

# A placeholder (f-string `{…}`, `%d`/`%s`, template `}}`), maybe tags and one word, then
# a fixed "GPUs": "{held} GPUs", "{n} H200 GPUs", "<strong>{{ n }}</strong> GPUs" (not
# "all {gpu_type} GPUs": no number there).
FIXED_PLURAL = re.compile(
    r"(?<!all )(\{[^{}]*\}|%[sd]|\}\})\s*(</?\w+>\s*)*([A-Za-z0-9_{}.]+\s+)?GPUs\b|GPU\(s\)"
)
SKIPPED = ("tests/", "bench/", "scripts/", "docs/")


def _sources() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.html", "*.js"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [name for name in listed if not name.startswith(SKIPPED)]


def test_no_number_is_followed_by_a_fixed_plural():
    found = []
    for name in _sources():
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") and FIXED_PLURAL.search(line):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert found == []


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        ('f"quota {q.name} has {free} GPUs"', True),
        ('f"the cluster has {n} {gpu_type} GPUs"', True),
        ("<strong>{{ o.after }}</strong> GPUs of its own", True),
        ('log.info("registered (%d GPUs)", n)', True),
        ('f"its {n} GPU(s) are idle"', True),
        ('f"has {words.gpus(free)}"', False),
        ("{{ n }} GPU{{ n|pluralize }}", False),
        ('"all H200 GPUs are in use"', False),
        ('f"all {gpu_type} GPUs are in use"', False),
    ],
)
def test_the_check_catches_each_form(line, caught):
    assert bool(FIXED_PLURAL.search(line)) is caught


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        (gpus(1), "1 GPU"),
        (gpus(0), "0 GPUs"),
        (gpus(8), "8 GPUs"),
        (gpus(1, "H200"), "1 H200 GPU"),
        (gpus(4, "H200"), "4 H200 GPUs"),
        (gpus(1.0), "1 GPU"),
        (gpus(2.5), "2.5 GPUs"),
        (plural(1, "CPU"), "1 CPU"),
        (plural(3, "GB memory", "GB memory"), "3 GB memory"),
        (gpu_noun(1), "GPU"),
        (gpu_noun(4), "GPUs"),
    ],
)
def test_how_numbers_of_gpus_are_written(written, expected):
    assert written == expected
