"""`gpu-console submit … -- ARGV`: the worker runs the stored command with `/bin/sh -c`
(agents.node.runtimes), so the stored line must split back into exactly the argv given."""

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from cli.__main__ import parser
from cli.submit import build_spec

# What a command line can carry: no NUL (argv cannot hold one), no lone surrogates.
ARG = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def stored_command(*argv: str) -> str:
    args = parser().parse_args(["submit", "--quota", "q", "--image", "busybox", "--", *argv])
    spec, _ = build_spec(args)
    return spec["command"]


def run_like_a_worker(command: str) -> list[str]:
    out = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, check=True, timeout=30
    )
    return json.loads(out.stdout)


@settings(max_examples=60, deadline=None)
@given(st.lists(ARG, max_size=5))
def test_the_worker_runs_exactly_the_argv_given(argv):
    command = stored_command(sys.executable, "-c", PRINT_ARGV, *argv)
    assert run_like_a_worker(command) == argv


def test_a_shell_loop_survives_with_its_quoting():
    command = stored_command("sh", "-c", "for i in $(seq 1 3); do echo $i; done")
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "2", "3"]


def test_one_argument_is_a_command_line_as_written():
    assert stored_command('echo "a b"; echo c') == 'echo "a b"; echo c'


def test_hang_action_takes_the_forms_words():
    args = parser().parse_args(["submit", "--hang-action", "Restart", "--", "true"])
    assert args.hang_action == "restart"
