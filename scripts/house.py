"""Draw the house: the rooms (top-level packages, and `agents.node`/`agents.sdk`) on floors,
from the imports the code really makes (read with the layout rules' own AST reader,
`tests/architecture/rules.py`; nothing is imported or run).

A room's floor is one above the highest room it imports; a room that imports none of ours
stands on floor 1, and rooms that nothing ties to the rest stand apart. ARCHITECTURE.md
holds the picture between its `house:begin`/`house:end` markers, and a test fails when the
picture there is not what this script draws now (tests/architecture/test_house.py).

    python scripts/house.py            print the picture
    python scripts/house.py --write    write it into ARCHITECTURE.md
    python scripts/house.py --check    exit 1 when ARCHITECTURE.md's picture is stale
"""

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.architecture import rules  # noqa: E402

BEGIN, END = "<!-- house:begin -->", "<!-- house:end -->"
WIDTH = 96


def arrows() -> dict[str, set[str]]:
    """room → the rooms it imports (its own excluded), as the code stands."""
    found: dict[str, set[str]] = {room: set() for room in rules.ALLOWED}
    for path in rules.source_files():
        for imp in rules.imports_of(path):
            here, there = rules.room_of(imp.module), rules.room_of(imp.target)
            if here and there and here != there:
                found[here].add(there)
    return found


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor: 1 + the highest floor it imports (a circle would never settle:
    the rooms caught in one are given floor 0, which the picture shows)."""
    floor: dict[str, int] = {}
    for _ in range(len(graph) + 1):
        changed = False
        for room, targets in graph.items():
            value = 1 + max((floor.get(t, 0) for t in targets), default=0)
            if floor.get(room) != value:
                floor[room], changed = value, True
        if not changed:
            return floor
    return {room: 0 for room in graph}


def _wrap(prefix: str, words: list[str]) -> list[str]:
    lines, line = [], prefix
    for word in words:
        if len(line) + len(word) + 2 > WIDTH and line.strip() != prefix.strip():
            lines.append(line.rstrip())
            line = " " * len(prefix)
        line += word + "  "
    lines.append(line.rstrip())
    return lines


def picture() -> str:
    graph = arrows()
    importers: dict[str, set[str]] = defaultdict(set)
    for room, targets in graph.items():
        for target in targets:
            importers[target].add(room)
    apart = sorted(r for r in graph if not graph[r] and not importers[r])
    floor = floors({r: t for r, t in graph.items() if r not in apart})
    out = ["Floors (a room imports only rooms below it; drawn from the code's imports):", ""]
    for level in sorted(set(floor.values()), reverse=True):
        rooms = sorted(r for r in floor if floor[r] == level)
        out += _wrap(f"  floor {level}  ", rooms)
    out += _wrap("  apart    ", apart) if apart else []
    out += ["", "Arrows (room → what it imports):", ""]
    for room in sorted(graph, key=lambda r: (-floor.get(r, 0), r)):
        if graph[room]:
            targets = sorted(graph[room], key=lambda r: (-floor.get(r, 0), r))
            out += _wrap(f"  {room:<14}→ ", targets)
    return "\n".join(out) + "\n"


def block(text: str) -> str:
    return f"{BEGIN}\n```text\n{text}```\n{END}"


def current_block(document: str) -> str | None:
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < 0:
        return None
    return document[start : end + len(END)]


def main(argv: list[str]) -> int:
    text = picture()
    target = ROOT / "ARCHITECTURE.md"
    if "--write" in argv or "--check" in argv:
        document = target.read_text()
        old = current_block(document)
        if old is None:
            print(f"ARCHITECTURE.md has no {BEGIN} … {END} block", file=sys.stderr)
            return 1
        if "--check" in argv:
            stale = old != block(text)
            if stale:
                print("ARCHITECTURE.md's picture is stale: python scripts/house.py --write")
            return int(stale)
        target.write_text(document.replace(old, block(text)))
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
