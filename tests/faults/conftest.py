"""Fixtures of the node fault tests (`node_*`), and the figures `make chaos` prints."""

import pytest

from tests.agents.agentproc import agents  # noqa: F401 - the real agent as a subprocess
from tests.faults.node_figures import FIGURES, NodeFigures


@pytest.fixture
def node_figures() -> NodeFigures:
    return FIGURES


def pytest_terminal_summary(terminalreporter) -> None:
    if FIGURES.injected:
        terminalreporter.section("node faults")
        for line in FIGURES.summary():
            terminalreporter.write_line(line)
