"""Fixtures for the results tests: the real agent as a subprocess, placed FT jobs, the
real console (the browser tests of results are in tests/e2e, beside the one browser)."""

from tests.agents.agentproc import agents  # noqa: F401 - the fixture, for every test here
from tests.faulttolerance.conftest import ft_job  # noqa: F401 - the fixture
