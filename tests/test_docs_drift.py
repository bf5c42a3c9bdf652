"""Docs that cannot drift from the code: the README's and the home page's table of layers,
the page of environment variables, and the tables, limits, fields and lists the pages
restate from the code."""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path

from mmelocal.builder.tarball import DEFAULT_MAX_MEMBERS
from mmelocal.emulator.answers import MAX_BODY_BYTES
from mmelocal.emulator.emulator_config import EmulatorConfig
from mmelocal.emulator.http_server import (
    MAX_HEAD_BYTES,
    MAX_QUEUED,
    MAX_QUEUED_BYTES,
    HttpTimeouts,
)
from mmelocal.emulator.invocation import MAX_DECODED_BYTES
from mmelocal.facts import triton_images
from mmelocal.facts.sagemaker import (
    BUSY_WAIT_S,
    MAX_ENDPOINT_NAME_LENGTH,
    MAX_PAYLOAD_BYTES,
    MAX_TARGET_MODEL_LENGTH,
)
from mmelocal.runtime.entrypoint import ENVIRONMENT_KNOBS, KNOBS, entrypoint_args
from mmelocal.units import MiB

ROOT = Path(__file__).parents[1]
#: ``MMELOCAL_*`` words in the code that are not environment variables
NOT_VARIABLES = {"MMELOCAL_FLAGS"}  # a Python name (the flags mmelocal adds to Triton's)


def _table(text: str, header: str) -> str:
    start = text.index(header)
    return text[start : text.index("\n\n", start)]


def test_readme_and_home_page_share_one_table_of_layers() -> None:
    readme = _table((ROOT / "README.md").read_text(), "| layer | commands |")
    home = _table((ROOT / "docs" / "index.md").read_text(), "| layer | commands |")
    assert readme.replace("](docs/", "](") == home


def code_variables() -> set[str]:
    """The ``MMELOCAL_*`` names mmelocal's code reads or mentions (HTTP headers aside)."""
    found: set[str] = set()
    for path in (ROOT / "mmelocal").rglob("*.py"):
        text = path.read_text()
        found |= set(re.findall(r"(?<![A-Z_])MMELOCAL_[A-Z0-9_]*[A-Z0-9]", text))
    return found - NOT_VARIABLES


#: where mmelocal's own test suite reads a variable: ``os.environ.get("X"``,
#: ``os.environ["X"``, ``${X`` / ``$X`` in a script, ``X=`` in the Makefile
_SUITE_READ = re.compile(
    r"""(?:environ(?:\.get\(|\[)["']|\$\{?)(MMELOCAL_[A-Z0-9_]*[A-Z0-9])|^\s*(MMELOCAL_[A-Z0-9_]*[A-Z0-9])=""",
    re.MULTILINE,
)


def suite_variables() -> set[str]:
    """The ``MMELOCAL_*`` variables mmelocal's tests, scripts and Makefile read."""
    found: set[str] = set()
    paths = [ROOT / "Makefile", *(ROOT / "tests").rglob("*.py"), *(ROOT / "tests").rglob("*.sh")]
    for path in paths:
        for match in _SUITE_READ.finditer(path.read_text()):
            found.add(match.group(1) or match.group(2))
    return found


def _page_names(prefix: str) -> set[str]:
    page = (ROOT / "docs" / "environment.md").read_text()
    return set(re.findall(rf"`({prefix}[A-Z0-9_]*[A-Z0-9])`", page))


def test_every_environment_variable_is_on_its_page() -> None:
    listed = _page_names("MMELOCAL_")
    variables = code_variables()
    assert "MMELOCAL_TRITONSERVER" in variables  # the search finds what it should
    assert variables - listed == set()
    suite = suite_variables()
    assert "MMELOCAL_SDK_VENVS" in suite  # the search finds what it should
    assert suite - listed == set()


def test_the_page_names_no_variable_that_nothing_reads() -> None:
    assert _page_names("MMELOCAL_") - code_variables() - suite_variables() == set()


def test_the_page_names_the_sagemaker_triton_variables_the_entrypoint_reads() -> None:
    knobs = {knob.key for knob in (*KNOBS, *ENVIRONMENT_KNOBS)}
    triton = {key for key in knobs if key.startswith("SAGEMAKER_TRITON_")}
    assert _page_names("SAGEMAKER_TRITON_") == triton
    assert _page_names("SAGEMAKER_") <= knobs


def _launch_page() -> str:
    return (ROOT / "docs" / "launch.md").read_text()


def test_the_launch_page_shows_the_entrypoints_default_command() -> None:
    page = _launch_page()
    start = page.index("```\ntritonserver ")
    block = page[start + 4 : page.index("```", start + 4)]
    assert block.replace("\\\n", " ").split() == ["tritonserver", *entrypoint_args({})]


def test_the_launch_pages_table_gives_each_variables_flag_and_default() -> None:
    """One row per variable the entrypoint reads: its flag and the default it passes."""
    rows: dict[str, list[str]] = {}
    for line in _table(_launch_page(), "| variable | flag | default |").splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = re.findall(r"`(_?[A-Z][A-Z0-9_]*)`", cells[0])
        first = names[0]
        for name in names:  # `_LOG_WARNING` abbreviates the first name's prefix
            full = first[: first.index("_LOG_")] + name if name.startswith("_") else name
            rows[full] = cells
    for knob in (*KNOBS, *ENVIRONMENT_KNOBS):
        assert knob.key in rows, f"{knob.key} has no row"
        flag, default = rows[knob.key][1], rows[knob.key][2]
        if knob.flag and knob.flag != "{}" and knob.what != "platform":
            assert knob.flag.split("{")[0].strip() in flag, (knob.key, flag)
            shown = re.match(r"`([^`]*)`", default)
            assert (shown.group(1) if shown else None) == knob.default, (knob.key, default)


def _rows(page: str, header: str) -> dict[str, str]:
    """A table's rows by their first cell (its text), each the whole row."""
    rows = {}
    for line in _table(page, header).splitlines()[2:]:
        rows[line.strip().strip("|").split("|")[0].strip()] = line
    return rows


def test_the_reliability_pages_limits_are_the_codes() -> None:
    limits = _rows((ROOT / "docs" / "reliability.md").read_text(), "| What | Limit | Past it |")
    expected = {
        "InvokeEndpoint body": [f"{MAX_PAYLOAD_BYTES // MiB} MiB", "`--max-payload`"],
        "Any request body (v2 infer included)": [f"{MAX_BODY_BYTES // MiB} MiB"],
        "gzip/deflate v2 infer body, inflated": [f"{MAX_DECODED_BYTES // MiB} MiB"],
        "Pipelined requests waiting on one connection": [
            f"{MAX_QUEUED} requests",
            f"{MAX_QUEUED_BYTES // MiB} MiB",
        ],
        "A request's line and headers": [f"{MAX_HEAD_BYTES // 1024} KiB", "431"],
        "`TargetModel`": [f"1 to {MAX_TARGET_MODEL_LENGTH:,} characters"],
        "`EndpointName`": [f"1 to {MAX_ENDPOINT_NAME_LENGTH} characters"],
        "A tarball": [f"{DEFAULT_MAX_MEMBERS:,} members", "`--disk-budget`"],
    }
    for what, shown in expected.items():
        for text in shown:
            assert text in limits[what], (what, text)


def test_the_reliability_pages_timeouts_are_the_defaults() -> None:
    rows = _rows((ROOT / "docs" / "reliability.md").read_text(), "| Timeout | Default |")
    config = {f.name: f.default for f in fields(EmulatorConfig)}
    http = {f.name: f.default for f in fields(HttpTimeouts)}
    expected = {
        "--header-timeout": http["header_s"],
        "--body-timeout": http["body_s"],
        "--idle-timeout": http["idle_s"],
        "`EmulatorConfig.invoke_timeout_s`": config["invoke_timeout_s"],
        "--load-wait": config["load_wait_timeout_s"],
        "`EmulatorConfig.load_timeout_s`": config["load_timeout_s"],
        "`facts.sagemaker.BUSY_WAIT_S`": BUSY_WAIT_S,
    }
    for option, default in expected.items():
        row = next(line for line in rows.values() if option in line)
        assert row.split("|")[2].strip().startswith(f"{default:g} s"), (option, row)


def test_the_design_pages_layers_name_every_part_of_the_package() -> None:
    page = (ROOT / "docs" / "design.md").read_text()
    start = page.index("```\nmmelocal/\n")
    block = page[start : page.index("```", start + 4)]
    named = set(re.findall(r"^  (\w+/|\w+\.py) ", block, re.MULTILINE))
    package = ROOT / "mmelocal"
    parts = {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()}
    parts |= {p.name for p in package.glob("*.py") if not p.name.startswith("_")}
    assert named == parts


def test_the_design_pages_modules_exist() -> None:
    """Each module the "where each behaviour lives" table names is there (a name after a
    path, `torch2onnx.py`, is in the path's folder)."""
    page = (ROOT / "docs" / "design.md").read_text()
    section = page[page.index("## Where each behaviour lives") : page.index("## A request's")]
    missing = []
    for row in section.splitlines()[4:]:
        if not row.startswith("| "):
            continue
        folder = ""
        for name in re.findall(r"`([\w/.]+)`", row.split("|")[2]):
            if "/" in name:
                name = name.removeprefix("mmelocal/")
                folder = name.rsplit("/", 1)[0] if name.endswith(".py") else name.rstrip("/")
                path = ROOT / "mmelocal" / name
            elif name.endswith(".py") and folder:
                path = ROOT / "mmelocal" / folder / name
            else:
                continue
            if not path.exists():
                missing.append(name)
    assert missing == []


def test_the_install_page_lists_every_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    table = _rows((ROOT / "docs" / "getting-started.md").read_text(), "| extra |")
    assert {name.strip("`") for name in table} == set(extras["optional-dependencies"])


def test_the_pytest_page_lists_every_fixture_of_the_plugin() -> None:
    from mmelocal.testing import plugin

    fixtures = {
        name
        for name, value in vars(plugin).items()
        if type(value).__name__ == "FixtureFunctionDefinition"
        or hasattr(value, "_pytestfixturefunction")
    }
    table = _rows((ROOT / "docs" / "pytest.md").read_text(), "| fixture | scope |")
    assert "triton_server" in fixtures
    assert {name.strip("`") for name in table} == fixtures


def _extra_packages(extras: list[str]) -> set[str]:
    """The distributions pyproject's ``extras`` install (an extra naming mmelocal[...]
    brings that one's too)."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = table["optional-dependencies"]
    names: set[str] = set()
    pending = list(extras)
    while pending:
        for requirement in optional[pending.pop()]:
            name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
            if name == "mmelocal":
                pending += requirement.split("[", 1)[1].split("]", 1)[0].split(",")
            else:
                names.add(name)
    return names


def test_the_pytest_page_installs_what_its_example_needs() -> None:
    """docs/pytest.md's first line installs mmelocal and the second runs
    examples/test_my_model.py: the extras must bring what that example builds and serves
    with (it read mmelocal[torch,onnx,triton]: no torchvision for its torchvision:resnet18)."""
    page = (ROOT / "docs" / "pytest.md").read_text()
    found = re.search(r"pip install 'mmelocal\[([^\]]*)\]'", page)
    assert found is not None
    installed = _extra_packages(found.group(1).split(","))
    example = (ROOT / "examples" / "test_my_model.py").read_text()
    needed = {"nvidia-pytriton"}  # the pip tritonserver that triton_server runs by default
    if '"torchvision:' in example:
        needed.add("torchvision")
    if 'format="onnx"' in example:
        needed |= {"torch", "onnx", "onnxruntime", "onnxscript"}
    assert needed <= installed, f"missing {sorted(needed - installed)}"


def test_the_traffic_pages_zipf_default_is_the_codes() -> None:
    """docs/traffic.md states ``traffic make``'s default popularity and Zipf exponent in
    prose ("(default, S = 1.0)"): they must be ``Popularity``'s defaults, which ``--zipf``
    shows."""
    from mmelocal.traffic.make import Popularity

    rows = _rows((ROOT / "docs" / "traffic.md").read_text(), "| option | popularity over ranks")
    row = next(line for option, line in rows.items() if option.startswith("`--zipf S`"))
    found = re.search(r"\(default, S = ([0-9.]+)\)", row)
    assert found is not None, row
    defaults = {f.name: f.default for f in fields(Popularity)}
    assert defaults["kind"] == "zipf"
    assert float(found.group(1)) == defaults["zipf_s"], row


def test_the_deploy_page_shows_the_triton_image_table() -> None:
    """``docs/deploy.md``'s table of SageMaker's Triton images is
    :data:`mmelocal.facts.triton_images.RELEASES`: one row per row, its releases, its
    us-east-1 account and its number of regions."""
    table = _table((ROOT / "docs" / "deploy.md").read_text(), "| Releases | Account")
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert len(rows) == len(triton_images.RELEASES)
    for row, releases in zip(rows, triton_images.RELEASES, strict=True):
        assert row[0] == "| " + ", ".join(releases.releases)
        assert row[1].split()[0] == releases.accounts["us-east-1"]
        assert row[2].split(",")[0] == str(len(releases.accounts))
    assert (
        f"The default, {triton_images.DEFAULT_SAGEMAKER_RELEASE},"
        in (ROOT / "docs" / "deploy.md").read_text()
    )


def _dict_keys(path: Path, function: str) -> set[str]:
    """The string keys of the dict literals in ``function`` of the module at ``path``."""
    import ast

    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    return {
        key.value
        for found in ast.walk(node)
        if isinstance(found, ast.Dict)
        for key in found.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    }


def test_the_serve_page_names_every_field_of_the_state_page() -> None:
    """docs/serve.md's ``GET /emulator/state`` item names each key the page answers: the
    emulator's, each instance's, each loaded model's and each event's."""
    from mmelocal.emulator.events import Event

    page = (ROOT / "docs" / "serve.md").read_text()
    start = page.index("- `GET /emulator/state`")
    named = set(re.findall(r"`(\w+)`", page[start : page.index("- `GET /ping`", start)]))
    emulator = ROOT / "mmelocal" / "emulator"
    keys = _dict_keys(emulator / "emulator.py", "state")
    keys |= _dict_keys(emulator / "instance.py", "usage_snapshot")
    keys |= {f.name for f in fields(Event)}
    assert {"held_footprints_bytes", "idle_s", "duration_ms"} <= keys  # the search works
    assert keys - named == set()


def test_the_measure_and_estimate_pages_name_every_card() -> None:
    """docs/measure.md's projection names every instance family of the card table, and
    docs/estimate.md's checked and projected cards are the estimate's."""
    from mmelocal.bench.capacity.projection import load_gpus
    from mmelocal.bench.estimate.core import CHECKED_CARDS

    gpus = load_gpus()
    families = {t.split(".")[1] for gpu in gpus for t in gpu.instances}
    page = (ROOT / "docs" / "measure.md").read_text()
    start = page.index("the projection table for")
    sentence = page[start : page.index("never swept as an instance", start)]
    assert families - set(re.findall(r"[a-z]\d\w*", sentence)) == set()
    page = (ROOT / "docs" / "estimate.md").read_text()
    found = re.search(r"Counts for (.+) are checked .+ without a published\nrun \((.+)\)", page)
    assert found is not None
    assert set(found.group(1).split(" and ")) == CHECKED_CARDS
    assert set(found.group(2).split(", ")) == {gpu.name for gpu in gpus} - CHECKED_CARDS


def test_the_install_line_says_which_extras_make_install_leaves_out() -> None:
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(r"^EXTRAS \?= (\S+)$", makefile, re.MULTILINE)
    assert found is not None
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    left_out = set(pyproject["optional-dependencies"]) - set(found.group(1).split(","))
    page = (ROOT / "docs" / "getting-started.md").read_text()
    line = next(ln for ln in page.splitlines() if ln.startswith("make install"))
    assert left_out and left_out <= set(re.findall(r"\w+", line.split("#", 1)[1]))


#: names the code reads from a mapping that are not environment variables mmelocal reads:
#: a WSGI request's keys, and the variables it extends for the servers it starts
NOT_READ = {"CONTENT_LENGTH", "CONTENT_TYPE", "PATH_INFO", "REQUEST_METHOD"}
NOT_READ |= {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH"}


def test_every_variable_the_code_reads_by_name_is_on_its_page() -> None:
    """``environ.get("X")``, ``environ["X"]`` and ``env.get("X")`` in mmelocal: each X (an
    AWS, Hugging Face, CUDA or moto variable as much as mmelocal's own) is on the page."""
    read = set()
    for path in (ROOT / "mmelocal").rglob("*.py"):
        read |= set(
            re.findall(r"env(?:iron)?(?:\.get\(|\[)[\"']([A-Z][A-Z0-9_]+)", path.read_text())
        )
    read -= NOT_READ
    read = {name for name in read if not name.startswith("HTTP_")}  # WSGI's headers
    assert {"HF_HUB_CACHE", "DOCKER_HOST", "MOTO_ACCOUNT_ID"} <= read  # the search works
    page = (ROOT / "docs" / "environment.md").read_text()
    assert read - set(re.findall(r"`([A-Z][A-Z0-9_]+)`", page)) == set()


def test_the_launch_pages_table_is_what_mmelocal_adds() -> None:
    """docs/launch.md's "What mmelocal adds" table: one row per entry of ``MMELOCAL_FLAGS``,
    each naming its flags, and the values the code passes."""
    from mmelocal.runtime.server_config import METRICS_INTERVAL_MS, MMELOCAL_FLAGS, ServerConfig

    rows = _rows(_launch_page(), "| flag | why |")
    assert len(rows) == len(MMELOCAL_FLAGS)
    cells = " ".join(rows)
    for key in MMELOCAL_FLAGS:
        for flag in key.split(", "):
            assert flag.split("=")[0] in cells, flag
    exit_timeout = next(f.default for f in fields(ServerConfig) if f.name == "exit_timeout_s")
    assert f"`--metrics-interval-ms={METRICS_INTERVAL_MS}`" in cells
    assert f"`--exit-timeout-secs={exit_timeout}`" in cells


def test_the_cli_page_names_the_commands_that_take_a_bare_json() -> None:
    """docs/cli.md names the commands whose bare ``--json`` is still read as ``--json -``."""
    import click

    from mmelocal.cli._options import BareJsonCommand
    from mmelocal.cli.main import cli

    def walk(command: click.Command | None, path: str) -> set[str]:
        if isinstance(command, click.Group):
            context = click.Context(command)
            names = command.list_commands(context)
            return set().union(
                *(walk(command.get_command(context, n), f"{path} {n}".strip()) for n in names)
            )
        return {path} if isinstance(command, BareJsonCommand) else set()

    page = (ROOT / "docs" / "cli.md").read_text()
    sentence = page[page.index("In `build`") : page.index("where `--json` was a flag")]
    assert set(re.findall(r"`([a-z -]+)`", sentence)) == walk(cli, "")
