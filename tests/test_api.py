"""The ``mmelocal`` facade: every public name importable from the package, typed, documented,
and loaded lazily so that ``import mmelocal`` stays light."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mmelocal
from mmelocal import errors

INIT = Path(mmelocal.__file__)


def test_import_mmelocal_loads_no_torch_no_boto3_no_layer() -> None:
    probe = (
        "import json, sys; import mmelocal; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'boto3', 'botocore', 'numpy', 'tritonclient', 'mmelocal'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["mmelocal", "mmelocal.errors"]


def test_a_name_loads_its_module_on_first_use() -> None:
    probe = (
        "import sys, mmelocal; assert 'mmelocal.emulator.server' not in sys.modules; "
        "from mmelocal import EmulatorServer; "
        "assert EmulatorServer.__module__ == 'mmelocal.emulator.server'; "
        "assert 'torch' not in sys.modules, 'serving needs no torch in this process'"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_every_public_name_resolves_and_is_documented() -> None:
    assert mmelocal.__all__ == sorted(set(mmelocal.__all__), key=mmelocal.__all__.index)
    for name in mmelocal.__all__:
        value = getattr(mmelocal, name)
        assert name in dir(mmelocal)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"mmelocal.{name} has no docstring"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = mmelocal.no_such_name  # type: ignore[attr-defined]


def test_every_error_class_is_exported() -> None:
    classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, errors.MmeLocalError)
    }
    assert classes <= set(mmelocal.__all__)


def test_type_checking_imports_match_the_lazy_table() -> None:
    """Type checkers see the names through ``if TYPE_CHECKING`` imports: the same names."""
    tree = ast.parse(INIT.read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for alias in imp.names:
                    typed[alias.asname or alias.name] = f"{imp.module}.{alias.name}"
    lazy = {name: f"{module}.{attr}" for name, (module, attr) in mmelocal._LAZY.items()}
    assert typed == lazy
    exported = set(mmelocal.__all__) - {"__version__"}
    eager = {n for n in exported if n not in lazy}
    assert all(hasattr(errors, n) for n in eager)


def test_the_public_list_is_the_errors_plus_the_lazy_table() -> None:
    """``__all__`` stays a literal (ruff, mypy and editors read it) but says nothing of its
    own: it is exactly the error classes, the lazy table's names and the version."""
    classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, errors.MmeLocalError)
    }
    assert set(mmelocal.__all__) == classes | set(mmelocal._LAZY) | {"__version__"}
