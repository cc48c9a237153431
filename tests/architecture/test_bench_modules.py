"""Every benchmark `bench/run.py` runs can at least be imported: no CI job runs the suite
itself (it needs a quiet machine and minutes), and a name moved elsewhere in the code
once left `bench.forecast` failing at its first line unnoticed."""

import importlib

import pytest

from bench.run import BENCHMARKS


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_imports(name):
    module = importlib.import_module(f"bench.{name}")
    assert callable(getattr(module, "main", None)), f"bench.{name} has no main()"
