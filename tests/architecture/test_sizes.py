"""No module over 500 lines, no function over 80, in the project's code (the rooms, `bench/`,
`scripts/`; not tests or migrations). A function's length counts its docstring."""

import ast
from pathlib import Path

from tests.architecture.rules import ROOT, source_files

MODULE_LINES = 500
FUNCTION_LINES = 80

# What is still too long, each with why it is not split yet. TODO(integrator): empty this at
# merge once the helpers that own these files have split them.
ALLOWED_MODULES = {}
ALLOWED_FUNCTIONS = {
    "bench/scheduler.py:bench_db": "treecore helper's file",
    # The heartbeat is being changed by the fault-tolerance work; split it after that merge.
    "agents/actions.py:record_heartbeat": "heartbeat work in flight (faultsnode)",
    # Benchmark and smoke scripts: one linear story each, split when next changed.
    "bench/kueue.py:measure": "benchmark script",
    "bench/logs.py:main": "benchmark script",
    "bench/pages.py:seed": "benchmark script",
    "bench/summary.py:lines": "benchmark script",
    "bench/wake.py:measure": "benchmark script",
    "scripts/gpu_smoke.py:main": "GPU smoke script",
}


def project_files() -> list[Path]:
    extra = [*sorted((ROOT / "bench").rglob("*.py")), *sorted((ROOT / "scripts").rglob("*.py"))]
    return [*source_files(), *extra, ROOT / "manage.py"]


def too_long() -> tuple[list[str], list[str]]:
    modules, functions = [], []
    for path in project_files():
        name = str(path.relative_to(ROOT))
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            modules.append(name)
        for node in ast.walk(ast.parse(text)):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                functions.append(f"{name}:{node.name}")
    return modules, functions


def test_no_module_or_function_is_too_long():
    modules, functions = too_long()
    assert [m for m in modules if m not in ALLOWED_MODULES] == []
    assert [f for f in functions if f not in ALLOWED_FUNCTIONS] == []


def test_the_allow_list_holds_only_what_is_still_too_long():
    modules, functions = too_long()
    assert sorted(set(ALLOWED_MODULES) - set(modules)) == []
    assert sorted(set(ALLOWED_FUNCTIONS) - set(functions)) == []
