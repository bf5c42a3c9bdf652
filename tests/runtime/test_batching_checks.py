"""validate's dynamic batching checks, judged by the real tritonserver: what validate refuses,
Triton refuses with the same words, and what validate passes, Triton loads (core
``ValidateModelConfig``, ``src/model_config_utils.cc``: priority levels, their queue
policies and ``preserve_ordering``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_models import PY_CONFIG, write_python_model

from mmelocal.builder.validate import validate_path
from mmelocal.errors import ModelLoadError
from mmelocal.runtime.client import TritonClient
from mmelocal.runtime.local import LocalLauncher
from mmelocal.runtime.server_config import ServerConfig

pytestmark = pytest.mark.triton

SUFFIX = "; Triton refuses the config"
DELAY = "timeout_action: DELAY default_timeout_microseconds: 100"

#: case -> (the dynamic_batching block's fields, Triton's words for the model bat_<case>;
#: None: it loads)
CASES: dict[str, tuple[str, str | None]] = {
    "priorities": (
        "priority_levels: 2 default_priority_level: 2 "
        "priority_queue_policy { key: 1 value { max_queue_size: 4 } }",
        None,
    ),
    "no_levels": ("default_priority_level: 5", None),  # read only with priority_levels
    "ordered": (
        "preserve_ordering: true priority_levels: 1 default_priority_level: 1 "
        "default_queue_policy { timeout_action: DELAY }",  # no timeout: never delayed
        None,
    ),
    "default_zero": (
        "priority_levels: 2",
        "default priority level must be in range [1, 2] for bat_default_zero",
    ),
    "default_above": (
        "priority_levels: 2 default_priority_level: 3",
        "default priority level must be in range [1, 2] for bat_default_above",
    ),
    "policy_level": (
        "priority_levels: 2 default_priority_level: 1 "
        "priority_queue_policy { key: 3 value { max_queue_size: 4 } }",
        "priority queue policy must have priority level in range [1, 2] for bat_policy_level",
    ),
    "ordered_levels": (
        "preserve_ordering: true priority_levels: 2 default_priority_level: 1",
        "Only one priority level is allowed when 'preserve_ordering' is true for "
        "bat_ordered_levels",
    ),
    "ordered_delay": (
        f"preserve_ordering: true default_queue_policy {{ {DELAY} }}",
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is "
        "true for bat_ordered_delay",
    ),
    "ordered_level_delay": (
        "preserve_ordering: true priority_levels: 1 default_priority_level: 1 "
        f"priority_queue_policy {{ key: 1 value {{ {DELAY} }} }}",
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is "
        "true for bat_ordered_level_delay",
    ),
}


def _repo(root: Path) -> Path:
    repo = root / "repo"
    for case, (fields, _) in CASES.items():
        name = f"bat_{case}"
        config = PY_CONFIG.format(name=name) + f"dynamic_batching {{ {fields} }}\n"
        write_python_model(repo, name, config=config)
    return repo


def test_validate_refuses_the_batching_triton_refuses_in_its_words(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    report = validate_path(repo)
    found: dict[str, list[str]] = {case: [] for case in CASES}
    for problem in report.errors:
        assert problem.code == "config.batching", problem
        assert problem.message.endswith(SUFFIX), problem
        found[Path(problem.path).name.removeprefix("bat_")].append(
            problem.message.removesuffix(SUFFIX)
        )
    for case, (_, words) in CASES.items():
        # Triton stops at the first problem: validate says that one, alone
        assert found[case] == ([] if words is None else [words]), (case, found[case])
    # the client closes before the server stops: Triton waits out its exit timeout (10 s)
    # while an HTTP connection is open
    with (
        LocalLauncher(ServerConfig(model_repository=repo), start_timeout_s=60) as launcher,
        TritonClient.for_launcher(launcher, load_timeout_s=60) as client,
    ):
        for case, (_, words) in CASES.items():
            if words is None:
                client.load(f"bat_{case}")  # Triton loads what validate passes
                continue
            with pytest.raises(ModelLoadError) as refused:
                client.load(f"bat_{case}")
            # in the load's answer or (a config refused while the repository is polled) the log
            assert launcher.log_path is not None
            said = refused.value.triton_message + launcher.log_path.read_text()
            assert words in said, (case, refused.value)
