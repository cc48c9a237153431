"""ARCHITECTURE.md's picture of the house is what `scripts/house.py` draws from the code now."""

import subprocess
import sys

from tests.architecture.rules import ROOT


def test_the_picture_in_architecture_md_is_current():
    result = subprocess.run(
        [sys.executable, "scripts/house.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_picture_follows_the_imports(tmp_path):
    """A room's floor moves when its imports do: the picture is drawn, not typed."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import house
    finally:
        sys.path.pop(0)
    graph = house.arrows()
    assert "protocol" in graph["policy"] and not graph["protocol"]
    floors = house.floors(graph)
    assert floors["console"] > floors["web"] > floors["jobs"] > floors["policy"] > 1
    assert house.floors({"a": {"b"}, "b": {"a"}}) == {"a": 0, "b": 0}  # a circle shows
