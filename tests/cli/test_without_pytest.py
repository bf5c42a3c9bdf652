"""The package works where pytest is not installed (it is only in the ``dev`` extra).

A child interpreter refuses every import of pytest, then imports every mmelocal module
except the three that are pytest plugins by nature. ``mmelocal demo`` once imported its
endpoint helper from the fixture module and failed after the model was built.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PYTEST_ONLY = {
    "mmelocal.testing.plugin",
    "mmelocal.testing.emulator_fixtures",
    "mmelocal.testing.local_aws_fixtures",
}

CHILD = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class NoPytest:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pytest", "_pytest"):
                raise ImportError(f"pytest is not installed (blocked: {name})")
            return None

    sys.meta_path.insert(0, NoPytest())
    import mmelocal
    skip = {"mmelocal.__main__", *sys.argv[1:]}  # __main__ runs the CLI when imported
    names = [m.name for m in pkgutil.walk_packages(mmelocal.__path__, "mmelocal.")]
    for name in sorted(names):
        if name not in skip:
            importlib.import_module(name)
    from mmelocal.cli import demo
    from mmelocal.testing.endpoint import MmeEndpoint
    assert "pytest" not in sys.modules
    print(len(names))
    """
)


def test_every_module_but_the_plugin_imports_without_pytest() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *sorted(PYTEST_ONLY)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) > 100


def test_the_plugin_modules_are_the_only_ones_that_need_pytest() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode != 0
    assert "pytest is not installed" in result.stderr


def test_no_module_imports_a_plugin_module_even_lazily() -> None:
    """Imports inside functions count: ``demo`` imported the fixture module in one."""
    import ast
    from pathlib import Path

    import mmelocal

    root = Path(mmelocal.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        module = "mmelocal." + ".".join(path.relative_to(root).with_suffix("").parts)
        if module in PYTEST_ONLY:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            offenders += [f"{module}:{node.lineno} {n}" for n in names if n in PYTEST_ONLY]
            offenders += [
                f"{module}:{node.lineno} {n}" for n in names if n.split(".")[0] == "pytest"
            ]
    assert offenders == []
