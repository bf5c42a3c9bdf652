"""The fidelity corpus: tarballs made the ways users make them, each with the platform's
verdict and the rule behind it (SageMaker's Triton, ``SageMakerMMELoadModel``).

Every :class:`Case` builds its tarball into a store folder and says what ``validate``
reports (``ok`` and the codes it must show) and what InvokeEndpoint answers through
the emulator: ``served`` (the framework's own output for :data:`X`), or refused with
boto3's error code (``ValidationError`` 400, ``ModelError`` 424). The README lists
these cases (section "Layouts SageMaker's Triton serves").
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mmelocal.testing.tiny_model import MODEL_PY, expected, write_model

#: the request every served case answers: a batch of 2 rows of 4 floats
X = np.arange(8, dtype=np.float32).reshape(2, 4) / 4.0
Expect = Callable[[np.ndarray], np.ndarray]
Builder = Callable[[Path], "Expect | None"]


@dataclass(frozen=True, kw_only=True)
class Case:
    """One artifact, its verdict on the platform and the rule that gives it."""

    name: str
    rule: str
    build: Builder
    validate_ok: bool
    codes: tuple[str, ...] = ()
    served: bool = True
    error_code: str = ""
    error_text: tuple[str, ...] = field(default_factory=tuple)
    input_name: str = "INPUT0"

    @property
    def target(self) -> str:
        """The TargetModel (the tarball's key in the store)."""
        return f"{self.name}.tar.gz"


# -- helpers ------------------------------------------------------------------------------
def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    tar.addfile(info)


def _pack(dest: Path, folders: dict[str, Path], *, extra: dict[str, bytes] | None = None) -> None:
    """``tar -czf dest`` with each folder under its arcname (directory entries included)."""
    with tarfile.open(dest, "w:gz") as tar:
        for arcname, folder in folders.items():
            tar.add(folder, arcname=arcname)
        for name, data in (extra or {}).items():
            _add_bytes(tar, name, data)


def _files_only(dest: Path, folder: Path, *, prefix: str) -> None:
    """Members for files only (no directory entries), each named ``prefix + relative``."""
    with tarfile.open(dest, "w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                _add_bytes(tar, prefix + path.relative_to(folder).as_posix(), path.read_bytes())


def _tiny(work: Path, name: str = "tiny", scale: float = 2.0) -> Path:
    return write_model(work, name=name, scale=scale)


def _scaled(scale: float) -> Expect:
    return lambda x: expected(x, scale)


def _set_config(folder: Path, old: str, new: str) -> None:
    path = folder / "config.pbtxt"
    text = path.read_text()
    assert old in text, (old, text)
    path.write_text(text.replace(old, new, 1))


def _append_config(folder: Path, text: str) -> None:
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + text)


def _env_path_parameter(folder: Path, filename: str) -> None:
    _append_config(
        folder,
        'parameters { key: "EXECUTION_ENV_PATH" value { string_value: '
        f'"$$TRITON_MODEL_DIRECTORY/{filename}" }} }}\n',
    )


def _work(dest: Path) -> Path:
    """A scratch folder beside the store holding ``dest`` (under the test's own tmp)."""
    return Path(tempfile.mkdtemp(prefix="corpus-", dir=dest.parent.parent))


def torchscript_linear(folder: Path, *, name: str | None, kind: str = "KIND_GPU") -> Expect:
    """A TorchScript ``Linear(4, 3)`` model folder (``1/model.pt``); the torch forward."""
    import torch

    torch.manual_seed(7)
    module = torch.nn.Linear(4, 3).eval()
    (folder / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.trace(module, torch.zeros(1, 4)).save(str(folder / "1" / "model.pt"))
    name_line = f'name: "{name}"\n' if name else ""
    (folder / "config.pbtxt").write_text(
        name_line + 'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        f"instance_group [ {{ kind: {kind} count: 1 }} ]\n"
    )

    def forward(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out: np.ndarray = module(torch.from_numpy(x)).numpy()
        return out

    return forward


def ensemble_config(name: str, steps: list[tuple[str, str, str]], out: str, dims: int) -> str:
    """An ensemble chaining ``steps`` [(model, input name, output name)] from INPUT0."""
    blocks = []
    for index, (model, in_name, out_name) in enumerate(steps):
        source = "INPUT0" if index == 0 else f"t{index - 1}"
        target = out if index == len(steps) - 1 else f"t{index}"
        blocks.append(
            f'{{ model_name: "{model}" model_version: -1 '
            f'input_map {{ key: "{in_name}" value: "{source}" }} '
            f'output_map {{ key: "{out_name}" value: "{target}" }} }}'
        )
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f'output [ {{ name: "{out}" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        f"ensemble_scheduling {{ step [ {', '.join(blocks)} ] }}\n"
    )


def _ensemble_folder(work: Path, name: str, config: str) -> Path:
    folder = work / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    return folder


# -- the cases ----------------------------------------------------------------------------
def root_layout(dest: Path) -> Expect:
    """config.pbtxt + 1/model.pt at the archive root, no name, KIND_GPU (packaging helpers)."""
    work = _work(dest)
    forward = torchscript_linear(work / "m", name=None, kind="KIND_GPU")
    with tarfile.open(dest, "w:gz") as tar:
        for child in sorted((work / "m").iterdir()):
            tar.add(child, arcname=child.name)
    return forward


def seed_layout(dest: Path) -> Expect:
    """``tar -C repo -czf model.tar.gz tiny`` (what ``mmelocal package`` writes)."""
    _pack(dest, {"tiny": _tiny(_work(dest), scale=3.0)})
    return _scaled(3.0)


def folder_name_differs(dest: Path) -> Expect:
    """Folder ``tiny`` whose config says ``name: "other"``."""
    folder = _tiny(_work(dest), scale=4.0)
    _set_config(folder, 'name: "tiny"', 'name: "other"')
    _pack(dest, {"tiny": folder})
    return _scaled(4.0)


def no_name(dest: Path) -> Expect:
    """A config without ``name``."""
    folder = _tiny(_work(dest), scale=5.0)
    _set_config(folder, 'name: "tiny"\n', "")
    _pack(dest, {"tiny": folder})
    return _scaled(5.0)


def ensemble_two_steps(dest: Path) -> Expect:
    """``pre/`` (Python) -> ``lin/`` (TorchScript) chained by ``ens/``."""
    work = _work(dest)
    pre = _tiny(work, "pre", scale=2.0)
    forward = torchscript_linear(work / "lin", name="lin", kind="KIND_GPU")
    steps = [("pre", "INPUT0", "OUTPUT0"), ("lin", "INPUT__0", "OUTPUT__0")]
    ens = _ensemble_folder(work, "ens", ensemble_config("ens", steps, "OUT", 3))
    _pack(dest, {"pre": pre, "lin": work / "lin", "ens": ens})
    return lambda x: forward(expected(x, 2.0))


def ensemble_three_steps(dest: Path) -> Expect:
    """Three Python steps ``a -> b -> c`` chained by ``chain/``."""
    work = _work(dest)
    folders = {n: _tiny(work, n, scale=s) for n, s in (("a", 2.0), ("b", 0.5), ("c", 3.0))}
    steps = [(n, "INPUT0", "OUTPUT0") for n in folders]
    folders["chain"] = _ensemble_folder(work, "chain", ensemble_config("chain", steps, "Y", 4))
    _pack(dest, folders)
    return lambda x: expected(expected(expected(x, 2.0), 0.5), 3.0)


def shared_step(scale: float) -> Callable[[Path], Expect]:
    """An ensemble whose single step is named ``shared_pre`` (two tarballs use the name)."""

    def build(dest: Path) -> Expect:
        work = _work(dest)
        pre = _tiny(work, "shared_pre", scale=scale)
        steps = [("shared_pre", "INPUT0", "OUTPUT0")]
        ens = _ensemble_folder(work, "ens", ensemble_config("ens", steps, "OUT", 4))
        _pack(dest, {"shared_pre": pre, "ens": ens})
        return _scaled(scale)

    return build


def two_plain_folders(dest: Path) -> None:
    """Two model folders, no ensemble."""
    work = _work(dest)
    _pack(dest, {"tiny": _tiny(work), "tiny2": _tiny(work, "tiny2")})


def dot_slash(dest: Path) -> Expect:
    """``tar -czf m.tar.gz .`` style members: ``./tiny/config.pbtxt``."""
    _files_only(dest, _tiny(_work(dest), scale=6.0), prefix="./tiny/")
    return _scaled(6.0)


def no_directory_entries(dest: Path) -> Expect:
    """Only file members (zip-to-tar converters, some CI scripts)."""
    _files_only(dest, _tiny(_work(dest), scale=7.0), prefix="tiny/")
    return _scaled(7.0)


def appledouble(dest: Path) -> Expect:
    """macOS tar: ``._*`` AppleDouble files beside every file, at the top level too."""
    junk = b"\x00\x05\x16\x07AppleDouble"
    extra = {"._tiny": junk, "tiny/._config.pbtxt": junk, "tiny/1/._model.py": junk}
    _pack(dest, {"tiny": _tiny(_work(dest), scale=8.0)}, extra=extra)
    return _scaled(8.0)


def macosx_folder(dest: Path) -> None:
    """Finder's compress: a ``__MACOSX/`` folder beside the model folder."""
    extra = {"__MACOSX/tiny/._config.pbtxt": b"\x00\x05\x16\x07"}
    _pack(dest, {"tiny": _tiny(_work(dest))}, extra=extra)


def ds_store(dest: Path) -> Expect:
    """``.DS_Store`` files at the top level and in the model folder."""
    extra = {".DS_Store": b"\x00\x00\x00\x01Bud1", "tiny/.DS_Store": b"\x00\x00\x00\x01Bud1"}
    _pack(dest, {"tiny": _tiny(_work(dest), scale=9.0)}, extra=extra)
    return _scaled(9.0)


def hidden_folder(dest: Path) -> None:
    """A Jupyter ``.ipynb_checkpoints/`` folder beside the model folder."""
    work = _work(dest)
    (work / "cp").mkdir()
    (work / "cp" / "model-checkpoint.py").write_text("# checkpoint\n")
    _pack(dest, {"tiny": _tiny(work), ".ipynb_checkpoints": work / "cp"})


def versions_with_policy(dest: Path) -> Expect:
    """Versions ``1`` and ``2`` (2 adds 100); ``version_policy`` serves 1 only."""
    folder = _tiny(_work(dest), scale=2.0)
    (folder / "2").mkdir()
    (folder / "2" / "model.py").write_text(MODEL_PY.replace("+ 1.0", "+ 101.0"))
    _append_config(folder, "version_policy: { specific: { versions: [ 1 ] } }\n")
    _pack(dest, {"tiny": folder})
    return _scaled(2.0)


def warmup_with_files(dest: Path) -> Expect:
    """``model_warmup`` reading its input from ``warmup/INPUT0`` in the model folder."""
    folder = _tiny(_work(dest), scale=1.5)
    (folder / "warmup").mkdir()
    (folder / "warmup" / "INPUT0").write_bytes(np.ones(4, dtype=np.float32).tobytes())
    _append_config(
        folder,
        'model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" '
        'value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "INPUT0" } } } ]\n',
    )
    _pack(dest, {"tiny": folder})
    return _scaled(1.5)


USER_MODEL_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils

from helpers import offset


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.join(args["model_repository"], "labels.txt")
        self.bias = float(open(here).read().split()[0]) + offset()

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = (x - self.bias).astype(np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return out
"""


def python_own_model(dest: Path) -> Expect:
    """A Python model the user wrote: own model.py importing a helper, a data file."""
    folder = _tiny(_work(dest))
    (folder / "1" / "model.py").write_text(USER_MODEL_PY)
    (folder / "1" / "helpers.py").write_text("def offset():\n    return 0.25\n")
    (folder / "labels.txt").write_text("10\n")
    _pack(dest, {"tiny": folder})
    return lambda x: (x - 10.25).astype(np.float32)


def python_missing_env(dest: Path) -> None:
    """EXECUTION_ENV_PATH names a conda-pack tarball the model folder does not hold."""
    folder = _tiny(_work(dest))
    _env_path_parameter(folder, "py310.tar.gz")
    _pack(dest, {"tiny": folder})


def python_with_env(dest: Path) -> Expect:
    """EXECUTION_ENV_PATH naming a packed environment in the model folder whose Python is
    the stub's (a stand-in for ``conda pack``: ``bin/activate`` puts this interpreter,
    with numpy, first on PATH; the Python backend unpacks it and sources the script)."""
    import sys

    folder = _tiny(_work(dest), scale=2.5)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    activate = f'export PATH="{Path(sys.executable).parent}:$PATH"\n'.encode()
    with tarfile.open(folder / "env.tar.gz", "w:gz") as tar:
        _add_bytes(tar, "bin/activate", activate)
        _add_bytes(tar, f"lib/python{version}/site-packages/.keep", b"")
    _env_path_parameter(folder, "env.tar.gz")
    _pack(dest, {"tiny": folder})
    return _scaled(2.5)


def tensorrt_plan(dest: Path) -> None:
    """``platform: "tensorrt_plan"`` with ``1/model.plan`` (built for a GPU)."""
    folder = _tiny(_work(dest), "trt")
    (folder / "1" / "model.py").unlink()
    (folder / "1" / "model.plan").write_bytes(b"ftrt" + bytes(64))
    _set_config(folder, 'backend: "python"', 'platform: "tensorrt_plan"')
    _pack(dest, {"trt": folder})


def tensorflow_savedmodel(dest: Path) -> None:
    """``platform: "tensorflow_savedmodel"`` (a backend the pip tritonserver lacks)."""
    folder = _tiny(_work(dest), "tf")
    (folder / "1" / "model.py").unlink()
    (folder / "1" / "model.savedmodel").mkdir()
    (folder / "1" / "model.savedmodel" / "saved_model.pb").write_bytes(b"\x08\x01")
    _set_config(folder, 'backend: "python"', 'platform: "tensorflow_savedmodel"')
    _pack(dest, {"tf": folder})


def empty_tarball(dest: Path) -> None:
    """An archive with no member at all."""
    with tarfile.open(dest, "w:gz"):
        pass


def config_only(dest: Path) -> None:
    """Just ``config.pbtxt`` at the root: no version folder, no model file."""
    folder = _tiny(_work(dest))
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(folder / "config.pbtxt", arcname="config.pbtxt")


def config_unparsable(dest: Path) -> None:
    """A TorchScript model whose config.pbtxt does not parse (a typo in a value)."""
    work = _work(dest)
    torchscript_linear(work / "ts", name="ts")
    _append_config(work / "ts", "max_batch_size: lots\n")
    _pack(dest, {"ts": work / "ts"})


def served(name: str, rule: str, build: Builder, *codes: str, input_name: str = "INPUT0") -> Case:
    """A case the platform serves (validate passes; the answer is the framework's)."""
    return Case(
        name=name, rule=rule, build=build, validate_ok=True, codes=codes, input_name=input_name
    )


def refused(name: str, rule: str, build: Builder, code: str, error: str, *text: str) -> Case:
    """A case validate fails with ``code`` and the emulator refuses with ``error``."""
    return Case(
        name=name,
        rule=rule,
        build=build,
        validate_ok=False,
        codes=(code,),
        served=False,
        error_code=error,
        error_text=text,
    )


def unrunnable_here(name: str, rule: str, build: Builder, *text: str) -> Case:
    """Served on SageMaker (validate warns), a ModelError at once on this CPU-only host."""
    return Case(
        name=name,
        rule=rule,
        build=build,
        validate_ok=True,
        codes=("host.unsupported",),
        served=False,
        error_code="ModelError",
        error_text=text,
    )


ENSEMBLE_RULE = "2: the ensemble is served, its steps load by their names"
SHARED_A = served(
    "shared-step-a",
    "3: steps keep their names (first shared_pre)",
    shared_step(2.0),
    "layout.ensemble",
)
#: served beside SHARED_A with its own step (the entrypoint turns model namespacing on);
#: with SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING=false its load collides with SHARED_A's
SHARED_B = served(
    "shared-step-b",
    "3: model namespacing (the entrypoint's default): each tarball's steps are its own",
    shared_step(3.0),
    "layout.ensemble",
)
#: the environment under which the two collide, as on SageMaker
NAMESPACING_OFF = {"SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false"}
UNDEFINED = "layout.ambiguous", "ValidationError"

CASES: tuple[Case, ...] = (
    served(
        "root-layout",
        "1: config.pbtxt at the root",
        root_layout,
        "layout.root",
        "config.no_name",
        input_name="INPUT__0",
    ),
    served("seed-layout", "2: one model folder", seed_layout),
    served(
        "folder-name-differs",
        "3: served as the TargetModel, config name ignored",
        folder_name_differs,
        "config.name_ignored",
    ),
    served("no-name", "3: a config may omit name", no_name, "config.no_name"),
    served("ensemble-2", ENSEMBLE_RULE, ensemble_two_steps, "layout.ensemble"),
    served("ensemble-3", ENSEMBLE_RULE, ensemble_three_steps, "layout.ensemble"),
    SHARED_A,
    SHARED_B,
    refused(
        "two-plain-folders",
        "2: several folders, no ensemble: undefined",
        two_plain_folders,
        *UNDEFINED,
        "tiny",
        "tiny2",
        "undefined",
    ),
    served("dot-slash", "2: `./` prefixes name the same folders", dot_slash),
    served("no-dir-entries", "2: folders implied by file members", no_directory_entries),
    served(
        "appledouble", "2: files at the top level are ignored", appledouble, "layout.ignored_file"
    ),
    refused(
        "macosx-folder",
        "2: __MACOSX is a folder too: undefined",
        macosx_folder,
        *UNDEFINED,
        "__MACOSX",
    ),
    served("ds-store", "2: files at the top level are ignored", ds_store, "layout.ignored_file"),
    refused(
        "hidden-folder",
        "2: hidden folders count: undefined",
        hidden_folder,
        *UNDEFINED,
        ".ipynb_checkpoints",
    ),
    served(
        "versions-policy", "Triton: version_policy picks the versions loaded", versions_with_policy
    ),
    served("warmup-files", "Triton: warmup reads input_data_file from warmup/", warmup_with_files),
    served("python-own-model", "Python backend: the user's model.py and files", python_own_model),
    served(
        "python-env", "Python backend: EXECUTION_ENV_PATH with the stub's Python", python_with_env
    ),
    refused(
        "python-missing-env",
        "Python backend: EXECUTION_ENV_PATH must exist",
        python_missing_env,
        "python.execution_env",
        "ModelError",
        "py310.tar.gz",
    ),
    unrunnable_here(
        "tensorrt-plan",
        "host: a TensorRT plan needs an NVIDIA GPU",
        tensorrt_plan,
        "tensorrt",
        "GPU",
        "docker",
    ),
    unrunnable_here(
        "tensorflow",
        "host: the pip tritonserver has no tensorflow backend",
        tensorflow_savedmodel,
        "tensorflow",
        "docker",
    ),
    refused(
        "empty",
        "an empty archive: nothing to load",
        empty_tarball,
        "archive.corrupt",
        "ValidationError",
        "empty archive",
    ),
    refused(
        "config-unparsable",
        "Triton: the container refuses a config.pbtxt that does not parse (its load: 400)",
        config_unparsable,
        "config.invalid",
        "ModelError",
        "failed to poll from model repository",
    ),
    refused(
        "config-only",
        "1 + Triton: a model needs a version folder",
        config_only,
        "layout.no_version",
        "ModelError",
        "version",
    ),
)


def case_named(name: str) -> Case:
    """The corpus case called ``name``."""
    return next(c for c in CASES if c.name == name)


def build_store(store: Path) -> dict[str, Expect | None]:
    """Write every case's tarball into ``store``; ``{TargetModel: expected-output fn}``."""
    store.mkdir(parents=True, exist_ok=True)
    return {case.target: case.build(store / case.target) for case in CASES}


__all__ = [
    "CASES",
    "NAMESPACING_OFF",
    "SHARED_A",
    "SHARED_B",
    "Case",
    "X",
    "build_store",
    "case_named",
    "torchscript_linear",
]
