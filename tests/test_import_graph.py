"""The package's import graph: no cycles, and the layers point one way.

Imports inside functions count (they are how cycles hide); ``if TYPE_CHECKING:`` blocks do
not (they never run). Layers (README, style guide): ``builder`` imports no other layer,
``runtime`` not the emulator, bench, CLI or deploy layers, nothing imports ``cli``, and
only ``cli`` and ``testing`` import ``localaws``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mmelocal

ROOT = Path(mmelocal.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    prefix = package[: len(package) - child.level + 1]
                    base = ".".join([*prefix, base] if base else prefix)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    found.add(full if full in known else base)
            elif isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the mmelocal modules it imports (at module level or inside functions)."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    known = set(paths)
    return {name: _imports(path, known) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
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
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    assert cycles(import_graph()) == []


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or module.endswith(("cli", "builder", "localaws")) else "top"


FORBIDDEN = {
    "builder": {"runtime", "emulator", "bench", "cli", "deploy", "testing", "localaws"},
    "runtime": {"emulator", "bench", "cli", "deploy", "localaws"},
    "emulator": {"bench", "cli", "deploy", "localaws"},
    "bench": {"localaws"},
    "deploy": {"localaws"},
    # the local AWS composes the emulator (and may use runtime, deploy and bench's GPU
    # table); only cli and testing import it
    "localaws": {"cli", "testing"},
}


def test_layers_point_one_way() -> None:
    wrong = []
    for module, imported in import_graph().items():
        for target in imported:
            if (
                _layer(target) == "cli"
                and _layer(module) != "cli"
                and module != "mmelocal.__main__"
            ):
                wrong.append(f"{module} -> {target}")
            if _layer(target) in FORBIDDEN.get(_layer(module), set()):
                wrong.append(f"{module} -> {target}")
    assert sorted(wrong) == []
