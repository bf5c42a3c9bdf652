"""validate's ensemble checks, judged by the real tritonserver: what validate refuses, Triton
refuses at load with the same words, and what validate passes, Triton loads."""

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

SUFFIX = "; Triton fails the ensemble's load"

ENSEMBLE = """\
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "IN" data_type: {in_type} dims: [ {in_dims} ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{extra}
ensemble_scheduling {{ step [ {{
  model_name: "{step}" model_version: -1
  input_map {{ key: "{in_key}" value: "IN" }}
  output_map {{ key: "{out_key}" value: "{out_value}" }}
}}{more_steps} ] }}
"""
#: a second step that reads a tensor no step writes
UNCONNECTED = """, {
  model_name: "add" model_version: -1
  input_map { key: "INPUT0" value: "NOWHERE" }
  output_map { key: "OUTPUT0" value: "OUT" }
}"""

#: case -> (changes to the good ensemble, words of Triton's refusal; None: it loads)
CASES: dict[str, tuple[dict[str, str], str | None]] = {
    "good": ({}, None),
    "input_map_key": (
        {"in_key": "INPUT9"},
        "ensemble tensor IN is mapping to non-existing input INPUT9 in model add",
    ),
    "output_map_key": (
        {"out_key": "OUTPUT9"},
        "ensemble tensor OUT is mapped from non-existing output OUTPUT9 in model add",
    ),
    "data_type": ({"in_type": "TYPE_INT32"}, "inconsistent data type"),
    "shape": ({"in_dims": "3"}, "inconsistent shape: [-1,3] is inferred from model"),
    "step_batch": ({"step": "small"}, "which only allows maximum batch size to be 2"),
    "output_unused": ({"out_value": "OTHER"}, "ensemble output 'OUT' for ensemble"),
    "not_connected": (
        {"out_value": "MID", "more_steps": UNCONNECTED},
        "is not written: at least one of its depending tensors, 'NOWHERE', is not connected",
    ),
    "instance_group": (
        {"extra": "instance_group [ { count: 1 kind: KIND_CPU } ]"},
        "instance group should not be specified for ensemble 'ens_instance_group'",
    ),
    # no folder for the step (Triton's words: model_repository_manager.cc, ConnectDependencyGraph)
    "step_folder_missing": (
        {"step": "absent"},
        "ensemble ens_step_folder_missing contains models that are not available or "
        "ambiguous: absent",
    ),
}


def _repo(root: Path) -> Path:
    repo = root / "repo"
    write_python_model(repo, "add")
    small = PY_CONFIG.format(name="small").replace("max_batch_size: 8", "max_batch_size: 2")
    write_python_model(repo, "small", config=small)
    for case, (changes, _) in CASES.items():
        values = {
            "name": f"ens_{case}",
            "in_type": "TYPE_FP32",
            "in_dims": "4",
            "step": "add",
            "in_key": "INPUT0",
            "out_key": "OUTPUT0",
            "out_value": "OUT",
            "extra": "",
            "more_steps": "",
            **changes,
        }
        folder = repo / f"ens_{case}"
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(ENSEMBLE.format(**values))
    return repo


def test_validate_refuses_the_ensembles_triton_refuses_in_its_words(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    report = validate_path(repo)
    found: dict[str, list[str]] = {case: [] for case in CASES}
    for problem in report.problems:
        case = Path(problem.path).name.removeprefix("ens_")
        if problem.code == "ensemble.invalid":
            assert problem.severity == "error" and problem.message.endswith(SUFFIX)
            found[case].append(problem.message.removesuffix(SUFFIX))
    other = [p for p in report.errors if p.code != "ensemble.invalid"]
    assert not other, other
    # the client closes before the server stops: Triton waits out its exit timeout (10 s)
    # while an HTTP connection is open
    with (
        LocalLauncher(ServerConfig(model_repository=repo), start_timeout_s=60) as launcher,
        TritonClient.for_launcher(launcher, load_timeout_s=60) as client,
    ):
        for case, (_, words) in CASES.items():
            if words is None:
                assert not found[case], found[case]
                client.load(f"ens_{case}")  # Triton loads what validate passes
                continue
            assert found[case] and words in found[case][0], (case, found[case])
            with pytest.raises(ModelLoadError) as refused:
                client.load(f"ens_{case}")
            # Triton stops at its first problem: validate's first is the same text, in the
            # load's answer or (a config refused while the repository is polled) its log
            assert launcher.log_path is not None
            said = refused.value.triton_message + launcher.log_path.read_text()
            assert found[case][0] in said, (case, refused.value)
