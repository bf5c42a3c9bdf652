"""Every exception mmelocal defines lives in mmelocal.errors and derives from MmeLocalError."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import mmelocal
from mmelocal import errors


def test_no_exception_class_outside_errors_module() -> None:
    root = Path(mmelocal.__file__).parent
    elsewhere = []
    for path in root.rglob("*.py"):
        if path.name == "errors.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).split(".")[-1].endswith(("Error", "Exception"))
                for base in node.bases
            ):
                elsewhere.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    assert elsewhere == []


def test_every_error_derives_from_the_root_and_has_a_docstring() -> None:
    classes = [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if cls.__module__ == errors.__name__
    ]
    assert len(classes) >= 25
    for cls in classes:
        assert issubclass(cls, errors.MmeLocalError), cls
        assert cls.__doc__, cls
        assert cls.__name__ in (errors.__doc__ or ""), f"{cls.__name__} missing from the tree"


def test_upstream_error_is_still_a_connection_error() -> None:
    assert issubclass(errors.UpstreamTimeoutError, ConnectionError)
    assert issubclass(errors.UpstreamTimeoutError, errors.EmulatorError)
