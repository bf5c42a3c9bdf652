"""The package's import graph: no cycles, and the layers point one way.

Imports inside functions count (they are how cycles hide); ``if TYPE_CHECKING:`` blocks do
not (they never run). Between the top-level packages only the edges listed in
:data:`ALLOWED` may exist: ``builder`` imports only the foundations, nothing imports
``cli``, only ``cli`` and ``testing`` import ``localaws``, and ``bench`` and ``deploy``
never import each other. Inside a package split by job (:data:`PARTS`) each part imports
only the parts listed for it, and never the package's front.
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


def _package(module: str) -> str:
    """The top-level part of mmelocal a module belongs to (``mmelocal.bench.capacity.loop``
    -> ``bench``, ``mmelocal.errors`` -> ``errors``, ``mmelocal`` itself -> ``mmelocal``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


#: the foundations: plain modules every layer may use (``docker_host``: where the Docker
#: engine runs and how to ask it for GPUs, for the TensorRT build and the Docker launcher)
_BASE = {"errors", "units", "facts", "docker_host"}

#: package -> the packages it may import (at module level or inside functions). An edge
#: that is not listed fails the test: add it here only when the layer it points to really
#: is below (nothing imports ``cli``; ``bench`` and ``deploy`` never import each other:
#: ``mmelocal benchmark`` hands bench a deployer from ``deploy.temporary``).
ALLOWED: dict[str, set[str]] = {
    "mmelocal": {"errors"},  # the package's lazy names are strings, imported on first use
    "__main__": {"cli"},
    "_moved": set(),
    "errors": set(),
    "units": {"errors"},
    "stats": {"errors"},
    "docker_host": {"errors"},
    # the platform's facts, then its pure rules (one home per fact, issue 25)
    "facts": {"errors", "units"},
    "rules": {"facts", "errors", "units"},
    "builder": _BASE,
    "aws": _BASE,
    "runtime": _BASE | {"builder"},
    "emulator": _BASE | {"rules", "stats", "builder", "runtime"},
    "bench": _BASE | {"_moved", "rules", "stats", "aws", "builder", "runtime", "emulator"},
    "deploy": _BASE | {"_moved", "aws", "builder", "runtime"},
    # the local AWS composes the emulator (and uses deploy's requests, bench's GPU table)
    "localaws": _BASE
    | {"rules", "stats", "aws", "builder", "runtime", "emulator", "bench", "deploy"},
    # replay, simulate and size: the platform's rules over the emulator and bench
    "traffic": _BASE | {"rules", "stats", "runtime", "emulator", "bench"},
    # the fixtures users import: mme_endpoint on a deployed endpoint uploads as deploy does
    "testing": _BASE | {"aws", "builder", "runtime", "emulator", "localaws", "deploy"},
    "cli": _BASE
    | {"rules", "stats", "aws", "builder", "runtime", "emulator", "bench", "deploy"}
    | {"localaws", "traffic", "testing"},
}


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(package, package it imports) -> the module imports that make that edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, imported in graph.items():
        for target in imported:
            edge = (_package(module), _package(target))
            if edge[0] != edge[1]:
                edges.setdefault(edge, []).append(f"{module} -> {target}")
    return edges


def test_every_package_is_listed() -> None:
    packages = {_package(module) for module in import_graph()}
    assert sorted(packages - set(ALLOWED)) == []


def test_only_listed_edges_between_packages() -> None:
    wrong = [
        f"{source} -> {target} ({sorted(why)[0]}, ...): not in ALLOWED[{source!r}]"
        for (source, target), why in package_edges(import_graph()).items()
        if target not in ALLOWED.get(source, set())
    ]
    assert sorted(wrong) == []


def test_bench_and_deploy_do_not_import_each_other() -> None:
    edges = package_edges(import_graph())
    assert edges.get(("bench", "deploy"), []) == []
    assert edges.get(("deploy", "bench"), []) == []


def test_an_unlisted_edge_is_found() -> None:
    graph = {"mmelocal.deploy.x": {"mmelocal.bench.capacity.loop"}, "mmelocal.bench.y": set()}
    assert package_edges(graph) == {
        ("deploy", "bench"): ["mmelocal.deploy.x -> mmelocal.bench.capacity.loop"]
    }
    assert "bench" not in ALLOWED["deploy"]


#: the modules split by job into packages: package -> its parts, each with the parts of the
#: same package it may import. No part imports the package itself (its ``__init__``, the
#: front that re-exports the parts), and every part is listed.
PARTS: dict[str, dict[str, set[str]]] = {
    # the open-loop replay: the schedule, where requests go, the emulator's state page, and
    # three senders over them (the Locust one checks aiohttp through the HTTP one's helper)
    "mmelocal.traffic.replay": {
        "schedule": set(),
        "targets": set(),
        "emulator_state": {"schedule"},
        "over_http": {"schedule", "targets", "emulator_state"},
        "over_locust": {"schedule", "targets", "emulator_state", "over_http"},
        "through_boto3": {"schedule"},
    },
    # the fleet simulation: what the fleet is, its instances, the callers' outcomes, the
    # loads, the event engine over them
    "mmelocal.traffic.simulate": {
        "config": set(),
        "fleet": {"config"},
        "callers": {"fleet"},
        "loads": {"callers", "fleet"},
        "engine": {"config", "fleet", "callers", "loads"},
    },
    # ``mmelocal traffic``: one module per command, none importing another; what several
    # share in the underscored parts
    "mmelocal.cli.traffic": {
        "_shared": set(),
        "_capacity": {"_shared"},
        "_measured": set(),
        "make_cmd": set(),
        "replay_cmd": {"_shared"},
        "simulate_cmd": {"_shared", "_capacity", "_measured"},
        "size_cmd": {"_shared", "_capacity", "_measured"},
    },
    # deploy, one module per job: the plan's data, the requests, the objects on S3 and the
    # waits below; undeploy beside the deployer (plan and apply), which re-exports it, and
    # never importing it; the temporary endpoint and smoke on top
    "mmelocal.deploy": {
        "images": set(),
        "plan": {"images"},
        "resources": {"plan"},
        "artifacts": {"plan", "resources"},
        "upload": {"artifacts"},
        "waits": {"resources"},
        "undeploy": {"artifacts", "plan", "resources", "upload", "waits"},
        # what a deploy did: the plan's record, beside the deployer (which fills it)
        "outcome": {"artifacts", "plan", "resources"},
        "deployer": {"artifacts", "images", "plan", "resources", "undeploy", "upload", "waits"},
        "temporary": {"deployer", "plan", "resources", "undeploy"},
        "smoke": {"plan", "upload"},
    },
    # the local AWS's WSGI app, one module per job: what a request says and the answers
    # below, the control plane and the runtime's face beside each other (neither imports
    # the other), the dispatch that routes to them on top
    "mmelocal.localaws.app": {
        "wsgi": set(),
        "answers": {"wsgi"},
        "control_plane": {"wsgi"},
        "runtime": {"answers", "wsgi"},
        "dispatch": {"answers", "control_plane", "runtime", "wsgi"},
    },
    # the local AWS's autoscaling, one module per job: the records and the pure pieces are
    # below what proposes, the autoscaler (the overlay and the control loop) is on top, and
    # nothing below imports the autoscaler
    "mmelocal.localaws.scaling": {
        "records": set(),
        "activities": set(),
        "decisions": set(),
        "checks": {"records"},
        "bookkeeping": {"records"},
        "tracking_alarms": {"bookkeeping", "records"},
        "step_scaling": {"bookkeeping", "decisions"},
        "target_tracking": {"bookkeeping", "decisions", "tracking_alarms"},
        "autoscaler": {
            "activities",
            "bookkeeping",
            "checks",
            "decisions",
            "records",
            "step_scaling",
            "target_tracking",
            "tracking_alarms",
        },
    },
}


def wrong_part_edges(
    graph: dict[str, set[str]], package: str, allowed: dict[str, set[str]]
) -> list[str]:
    """The imports between ``package``'s parts that ``allowed`` does not list, and any part's
    import of the package itself."""
    prefix = package + "."
    wrong: list[str] = []
    for module, imported in graph.items():
        if not module.startswith(prefix):
            continue
        part = module.removeprefix(prefix)
        for target in imported:
            if target == package:
                wrong.append(f"{part} -> {package} (the front)")
            elif target.startswith(prefix) and target.removeprefix(prefix) not in allowed[part]:
                wrong.append(f"{part} -> {target.removeprefix(prefix)}")
    return sorted(wrong)


def test_the_split_packages_parts_import_only_the_listed_parts() -> None:
    graph = import_graph()
    for package, allowed in PARTS.items():
        parts = {m.removeprefix(package + ".") for m in graph if m.startswith(package + ".")}
        assert sorted(parts) == sorted(allowed), package
        assert wrong_part_edges(graph, package, allowed) == [], package


def test_an_unlisted_part_edge_is_found() -> None:
    graph = {"p": {"p.a"}, "p.a": {"p.b", "p"}, "p.b": set(), "q": {"p.b"}}
    assert wrong_part_edges(graph, "p", {"a": set(), "b": set()}) == [
        "a -> b",
        "a -> p (the front)",
    ]
    assert wrong_part_edges(graph, "p", {"a": {"b"}, "b": set()}) == ["a -> p (the front)"]
