"""The rules of ARCHITECTURE.md hold (see tests/architecture/rules.py)."""

import subprocess
import sys
import textwrap

from tests.architecture import rules, writes


def test_dependencies_point_one_way():
    assert rules.layer_violations() == []


def test_the_rules_catch_what_they_are_for():
    """A deliberate violation of each rule is reported (so the rules cannot pass vacuously)."""
    bad = rules.ROOT / "jobs" / "_rules_probe.py"
    bad.write_text(
        textwrap.dedent(
            """
            from agents.actions import store_logs
            from jobs.models import Job

            def sneaky():
                Job.objects.filter(pk=1).update(status="Failed")
            """
        )
    )
    trespass = rules.ROOT / "jobs" / "actions" / "_rules_probe.py"
    trespass.write_text(
        textwrap.dedent(
            """
            from cluster.models import Node

            def cordon_behind_clusters_back():
                Node.objects.filter(pk=1).update(cordoned=True)
            """
        )
    )
    try:
        assert any("jobs._rules_probe" in v for v in rules.layer_violations())
        assert any("jobs._rules_probe" in v for v in writes.write_violations())
        assert any(
            "jobs.actions._rules_probe" in v and "another app" in v
            for v in writes.write_violations()
        )
    finally:
        bad.unlink()
        trespass.unlink()


def test_the_node_program_and_sdk_import_without_django():
    """What runs on GPU nodes and inside training jobs imports with Django absent."""
    probe = textwrap.dedent(
        """
        import importlib, pkgutil, sys

        class Absent:
            blocked = ("django", "celery", "django_htmx", "console", "jobs", "quotas",
                       "cluster", "accounts")
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in self.blocked:
                    raise ImportError(f"{name} is not installed on a GPU node")
                return None

        sys.meta_path.insert(0, Absent())
        import agents.node, agents.sdk, protocol
        names = ["agents.sdk", "protocol.agent"]
        for package in (agents.node, protocol):
            for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                names.append(info.name)
        for name in names:
            importlib.import_module(name)
        assert "django" not in sys.modules, "django was imported"
        print(len(names))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=rules.ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 15  # every module of the node program was imported


def test_the_cli_imports_without_django():
    """The CLI runs on researchers' laptops: requests and PyYAML only."""
    probe = textwrap.dedent(
        """
        import importlib, pkgutil, sys

        class Absent:
            blocked = ("django", "celery", "ninja", "pydantic", "console", "jobs", "quotas",
                       "cluster", "accounts", "api", "audit", "notifications", "agents")
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in self.blocked:
                    raise ImportError(f"{name} is not installed with the CLI")
                return None

        sys.meta_path.insert(0, Absent())
        import cli
        names = [info.name for info in pkgutil.walk_packages(cli.__path__, "cli.")]
        for name in names:
            importlib.import_module(name)
        print(len(names))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=rules.ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 5


def test_only_the_cycle_shell_of_the_scheduler_imports_actions():
    """The scheduler owns its types; only its shell module calls the writes (ARCHITECTURE.md)."""
    offenders = [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for path in sorted((rules.ROOT / "jobs" / "scheduler").rglob("*.py"))
        for imp in rules.imports_of(path)
        if imp.target.startswith("jobs.actions") and imp.module != "jobs.scheduler.cycle"
    ]
    assert offenders == []


def test_the_policy_core_and_simulator_import_without_django_or_the_apps():
    """`policy` and `simulator` are pure: every module imports with Django, Celery and every
    app of ours absent (only `protocol` below them)."""
    probe = textwrap.dedent(
        """
        import importlib, pkgutil, sys

        class Absent:
            blocked = ("django", "celery", "ninja", "django_htmx", "console", "jobs",
                       "quotas", "cluster", "accounts", "api", "audit", "notifications",
                       "agents", "kube", "usage", "web")
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in self.blocked:
                    raise ImportError(f"{name} may not be imported by the pure core")
                return None

        sys.meta_path.insert(0, Absent())
        import policy, simulator
        names = []
        for package in (policy, simulator):
            names.append(package.__name__)
            for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                names.append(info.name)
        for name in names:
            importlib.import_module(name)
        print(len(names))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=rules.ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 40  # every module of the core and the simulator


def test_the_purity_rules_catch_django_or_an_app_in_the_core():
    """A core module importing an app, or Django, is reported (the rule cannot pass
    vacuously)."""
    bad = rules.ROOT / "policy" / "_purity_probe.py"
    bad.write_text(
        "from django.db import models  # noqa: F401\nfrom jobs.models import Job  # noqa: F401\n"
    )
    try:
        found = [v for v in rules.layer_violations() if v.startswith("policy._purity_probe")]
    finally:
        bad.unlink()
    assert any("(policy → jobs)" in v for v in found), found
    assert any("no Django here" in v for v in found), found
