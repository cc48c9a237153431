"""No import circles between the application's modules (ARCHITECTURE.md, "Rules").

The graph: one node per module of the rooms (`rules.source_files`), an arrow for each import
(`rules.imports_of`: top-level and function-level alike, a lazy import is still a
dependency) to the module it names (`from jobs.tasks import schedule_tick` → `jobs.tasks`).
A circle is a set of modules that reach each other through such arrows: whichever of them
is read first, the others meet it half-initialised, and none can be understood, tested or
moved alone.
"""

import textwrap
from collections.abc import Iterable
from pathlib import Path

from tests.architecture import rules


def _module_of(target: str, modules: set[str]) -> str | None:
    """The module an import names: the longest known prefix (a name imported from a
    module is not a module of its own)."""
    parts = target.split(".")
    while parts:
        name = ".".join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


def import_graph(paths: Iterable[Path]) -> dict[str, set[str]]:
    """module → the modules it imports (of these files; other imports are left out)."""
    paths = list(paths)
    modules = {rules.module_name(path) for path in paths}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for path in paths:
        for imp in rules.imports_of(path):
            target = _module_of(imp.target, modules)
            if target is not None and target != imp.module:
                graph[imp.module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    without recursion), each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_module_imports_itself_through_others():
    assert circles(import_graph(rules.source_files())) == []


def test_the_test_finds_a_circle():
    """A planted pair (one import lazy, inside a function) is reported: the test cannot
    pass vacuously."""
    first = rules.ROOT / "jobs" / "_circle_probe_first.py"
    second = rules.ROOT / "jobs" / "_circle_probe_second.py"
    first.write_text("from jobs._circle_probe_second import helper\n")
    second.write_text(
        textwrap.dedent(
            """
            def helper():
                from jobs import _circle_probe_first

                return _circle_probe_first
            """
        )
    )
    try:
        found = circles(import_graph(rules.source_files()))
    finally:
        first.unlink()
        second.unlink()
    assert found == [["jobs._circle_probe_first", "jobs._circle_probe_second"]]
