"""validate_path and ``mmelocal validate``: good inputs pass, each bad input fails clearly."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builder_factories import (
    FLOAT,
    INT64,
    make_onnx_model_dir,
    make_tar,
    member,
    rewrite_config,
)

from mmelocal.builder.model_config import ConfigOptions
from mmelocal.builder.tarball import create_model_tarball
from mmelocal.builder.validate import validate_path
from mmelocal.cli.main import main


def run_validate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["validate", *args])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture
def good_model(tmp_path: Path) -> Path:
    return make_onnx_model_dir(tmp_path / "repo", "tiny")


def test_good_model_repo_and_tarball(tmp_path: Path, good_model: Path, capsys) -> None:
    tar = create_model_tarball(good_model, tmp_path / "model.tar.gz")
    for target in (good_model, good_model.parent, tar):
        report = validate_path(target)
        assert report.ok, report.problems
        assert report.models == ["tiny"]
        code, out = run_validate(capsys, str(target))
        assert code == 0 and "OK" in out
    code, out = run_validate(capsys, str(tar), "--json", "-")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and data["kind"] == "tarball"


# --------------------------------------------------------------------- the bad inputs
Case = Callable[[Path], tuple[Path, list[str]]]


def _model(tmp: Path, **kw: object) -> Path:
    return make_onnx_model_dir(tmp / "repo", "tiny", **kw)  # type: ignore[arg-type]


def corrupt_tarball(tmp: Path) -> tuple[Path, list[str]]:
    p = tmp / "model.tar.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 200)
    return p, []


def truncated_gzip(tmp: Path) -> tuple[Path, list[str]]:
    full = create_model_tarball(_model(tmp), tmp / "full.tar.gz")
    p = tmp / "model.tar.gz"
    p.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    return p, []


def gzip_of_text(tmp: Path) -> tuple[Path, list[str]]:
    p = tmp / "model.tar.gz"
    p.write_bytes(gzip.compress(b"this is not a tar archive\n" * 50))
    return p, []


def plain_text_named_tgz(tmp: Path) -> tuple[Path, list[str]]:
    p = tmp / "model.tar.gz"
    p.write_text("hello")
    return p, ["not a gzip file"]


def uncompressed_tar(tmp: Path) -> tuple[Path, list[str]]:
    p = tmp / "model.tar.gz"
    with tarfile.open(p, "w") as tar:
        tar.add(_model(tmp), arcname="tiny")
    return p, ["not a gzip file"]


def empty_archive(tmp: Path) -> tuple[Path, list[str]]:
    return make_tar(tmp / "model.tar.gz", []), ["empty archive"]


def absolute_member(tmp: Path) -> tuple[Path, list[str]]:
    return make_tar(tmp / "m.tar.gz", [member("/tmp/evil.txt", b"x")]), ["absolute path"]


def dotdot_member(tmp: Path) -> tuple[Path, list[str]]:
    return make_tar(tmp / "m.tar.gz", [member("tiny/../../evil", b"x")]), ["'..'"]


def symlink_outside(tmp: Path) -> tuple[Path, list[str]]:
    members = [
        member("tiny/", type_=tarfile.DIRTYPE),
        member("tiny/l", type_=tarfile.SYMTYPE, linkname="../../etc"),
    ]
    return make_tar(tmp / "m.tar.gz", members), ["outside"]


def symlink_chain_outside(tmp: Path) -> tuple[Path, list[str]]:
    members = [
        member("d", type_=tarfile.SYMTYPE, linkname="."),
        member("s", type_=tarfile.SYMTYPE, linkname="d/.."),
    ]
    return make_tar(tmp / "m.tar.gz", members), ["resolves outside"]


def write_through_symlink(tmp: Path) -> tuple[Path, list[str]]:
    members = [member("tiny", type_=tarfile.SYMTYPE, linkname="."), member("tiny/x", b"data")]
    return make_tar(tmp / "m.tar.gz", members), ["through a symlink"]


def hardlink_outside(tmp: Path) -> tuple[Path, list[str]]:
    members = [member("tiny/h", type_=tarfile.LNKTYPE, linkname="../etc/passwd")]
    return make_tar(tmp / "m.tar.gz", members), ["outside"]


def hardlink_absolute(tmp: Path) -> tuple[Path, list[str]]:
    members = [member("tiny/h", type_=tarfile.LNKTYPE, linkname="/etc/passwd")]
    return make_tar(tmp / "m.tar.gz", members), ["absolute"]


def device_file(tmp: Path) -> tuple[Path, list[str]]:
    return make_tar(tmp / "m.tar.gz", [member("tiny/dev", type_=tarfile.CHRTYPE)]), ["device"]


def fifo_member(tmp: Path) -> tuple[Path, list[str]]:
    return make_tar(tmp / "m.tar.gz", [member("tiny/p", type_=tarfile.FIFOTYPE)]), ["FIFO"]


def too_many_members(tmp: Path) -> tuple[Path, list[str]]:
    members = [member(f"tiny/f{i}", b"x") for i in range(20)]
    return make_tar(tmp / "m.tar.gz", members), ["--max-members", "5", "more than 5 members"]


def zip_bomb(tmp: Path) -> tuple[Path, list[str]]:
    p = make_tar(tmp / "m.tar.gz", [member("tiny/zeros", b"\0" * 5_000_000)])
    assert p.stat().st_size < 20_000
    return p, ["--max-unpacked-bytes", "1000000", "more than 1000000 bytes"]


def two_top_level_folders(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    p = tmp / "m.tar.gz"
    with tarfile.open(p, "w:gz") as tar:
        tar.add(model, arcname="tiny")
        tar.add(model, arcname="tiny2")
    return p, ["layout.ambiguous", "'tiny', 'tiny2'", "undefined"]


def file_at_top_level(tmp: Path) -> tuple[Path, list[str]]:
    # files at the top level are ignored by Triton (a warning); with no folder beside them
    # there is nothing to load
    model = _model(tmp)
    p = tmp / "m.tar.gz"
    with tarfile.open(p, "w:gz") as tar:
        tar.add(model / "config.pbtxt", arcname="README")
    return p, ["layout.empty", "nothing to load"]


def config_at_top_level(tmp: Path) -> tuple[Path, list[str]]:
    # the root layout is served (rule 1), but a model needs a version folder
    model = _model(tmp)
    p = tmp / "m.tar.gz"
    with tarfile.open(p, "w:gz") as tar:
        tar.add(model / "config.pbtxt", arcname="config.pbtxt")
    return p, ["layout.no_version"]


def missing_config(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    (model / "config.pbtxt").unlink()
    return model, ["config.missing"]


def missing_config_in_repo(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    (model / "config.pbtxt").unlink()
    (model / "1").rename(model / "weights")
    return model.parent, ["config.missing"]


def unknown_field(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "max_batch_sizes: 4\n")
    line = len(cfg.read_text().splitlines())
    return model, [f"line {line}", "'max_batch_sizes'"]


def bad_enum(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("TYPE_FP32", "TYPE_FLOAT32", 1))
    return model, ["'data_type'", "TYPE_FLOAT32"]


def bad_integer(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_batch_size: 8", "max_batch_size: eight"))
    return model, ["line 3", "'max_batch_size'"]


def negative_batch(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    rewrite_config(model, max_batch_size=-1)
    return model, ["max_batch_size must be >= 0, got -1"]


def name_mismatch(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    rewrite_config(model, name="other")
    return model, ["config.name_mismatch"]


def no_version_folder(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    (model / "1" / "model.onnx").rename(model / "model.onnx")
    (model / "1").rmdir()
    return model, ["layout.no_version"]


def non_numeric_version_only(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    (model / "1").rename(model / "v1")
    return model, ["layout.no_version"]


def missing_model_file(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    (model / "1" / "model.onnx").rename(model / "1" / "model_fp32.onnx")
    return model, ["artifact.missing", "model_fp32.onnx"]


def default_model_filename_missing(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    rewrite_config(model, default_model_filename="custom.onnx")
    return model, ["artifact.missing", "custom.onnx"]


def wrong_input_name(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "x"', 'name: "input"'))
    return model, ["io.unknown_input", "'input'"]


def wrong_output_name(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "y"', 'name: "logits"'))
    return model, ["io.unknown_output"]


def wrong_dtype(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp, inputs=(("ids", INT64, ("batch", 4)),))
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("TYPE_INT64", "TYPE_INT32"))
    return model, ["io.dtype", "TYPE_INT32", "TYPE_INT64"]


def wrong_rank(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("dims: [4]", "dims: [2, 2]", 1))
    return model, ["io.rank"]


def wrong_dims(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("dims: [4]", "dims: [5]", 1))
    return model, ["io.dims"]


def batch_dim_fixed(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(
        tmp,
        inputs=(("x", FLOAT, (1, 4)),),
        outputs=(("y", FLOAT, (1, 4)),),
        options=ConfigOptions(max_batch_size=0, dynamic_batching=False),
    )
    rewrite_config(model, max_batch_size=8)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("dims: [1, 4]", "dims: [4]"))
    return model, ["io.batch_dim_fixed"]


def missing_config_input(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp, inputs=(("a", FLOAT, ("b", 4)), ("m", FLOAT, ("b", 4))))
    text = (model / "config.pbtxt").read_text()
    start = text.index('input {\n  name: "m"')
    end = text.index("}\n", start) + 2
    (model / "config.pbtxt").write_text(text[:start] + text[end:])
    return model, ["io.missing_input", "'m'"]


def warmup_batch_too_big(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("batch_size: 1", "batch_size: 64"))
    return model, ["config.warmup", "batch_size 64"]


def dynamic_batching_without_batch(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    rewrite_config(model, max_batch_size=0)
    return model, ["config.batching"]


def warmup_dims_not_the_inputs(tmp: Path) -> tuple[Path, list[str]]:
    """Triton normalises each warmup request like any request: dims [5] for an input of
    dims [4] fail the load ("unexpected shape for input 'x'")."""
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    text = cfg.read_text()
    at = text.index("model_warmup")
    cfg.write_text(text[:at] + text[at:].replace("dims: [4]", "dims: [5]"))
    return model, ["config.warmup", "dims [5]", "[4]"]


def warmup_lacks_an_input(tmp: Path) -> tuple[Path, list[str]]:
    """A warmup sample must give every required input ("expected 2 inputs but got 1")."""
    model = _model(tmp, inputs=(("a", FLOAT, ("b", 4)), ("m", FLOAT, ("b", 4))))
    text = (model / "config.pbtxt").read_text()
    start = text.index('  inputs {\n    key: "m"')
    end = text.index("\n  }\n", start) + 5
    (model / "config.pbtxt").write_text(text[:start] + text[end:])
    return model, ["config.warmup", "'m'"]


def warmup_file_too_short(tmp: Path) -> tuple[Path, list[str]]:
    """Triton reads input_data_file for each warmup request and refuses one shorter than
    the input ("warmup setting expects 16 bytes, but the data provided ... only has 4")."""
    model = _model(tmp)
    (model / "warmup").mkdir()
    (model / "warmup" / "x.bin").write_bytes(b"\0" * 4)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("random_data: true", 'input_data_file: "x.bin"'))
    return model, ["config.warmup", "x.bin", "4 bytes", "16"]


def reshape_without_dims(tmp: Path) -> tuple[Path, list[str]]:
    """Triton refuses a tensor without dims even when it has a reshape ("must specify
    'dims'")."""
    model = _model(tmp)
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("dims: [4]\n}", "reshape { shape: [4] }\n}", 1))
    return model, ["config.invalid", "dims"]


def corrupt_onnx(tmp: Path) -> tuple[Path, list[str]]:
    model = _model(tmp)
    (model / "1" / "model.onnx").write_bytes(b"\x08\x07garbage" * 10)
    return model, ["artifact.unreadable"]


def empty_repo(tmp: Path) -> tuple[Path, list[str]]:
    (tmp / "repo").mkdir()
    return tmp / "repo", ["repo.empty"]


def path_missing(tmp: Path) -> tuple[Path, list[str]]:
    return tmp / "nope", ["path.missing"]


def not_a_model_file(tmp: Path) -> tuple[Path, list[str]]:
    p = tmp / "notes.txt"
    p.write_text("hi")
    return p, ["path.type"]


def fifo_path(tmp: Path) -> tuple[Path, list[str]]:
    p = tmp / "model.tar.gz"
    os.mkfifo(p)
    return p, ["path.type"]


def model_folder_is_a_file_in_repo(tmp: Path) -> tuple[Path, list[str]]:
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "model.onnx").write_bytes(b"x")
    return repo, ["repo.empty"]


CASES: list[Case] = [
    fifo_path,
    model_folder_is_a_file_in_repo,
    corrupt_tarball,
    truncated_gzip,
    gzip_of_text,
    plain_text_named_tgz,
    uncompressed_tar,
    empty_archive,
    absolute_member,
    dotdot_member,
    symlink_outside,
    symlink_chain_outside,
    write_through_symlink,
    hardlink_outside,
    hardlink_absolute,
    device_file,
    fifo_member,
    too_many_members,
    zip_bomb,
    two_top_level_folders,
    file_at_top_level,
    config_at_top_level,
    missing_config,
    missing_config_in_repo,
    unknown_field,
    bad_enum,
    bad_integer,
    negative_batch,
    name_mismatch,
    no_version_folder,
    non_numeric_version_only,
    missing_model_file,
    default_model_filename_missing,
    wrong_input_name,
    wrong_output_name,
    wrong_dtype,
    wrong_rank,
    wrong_dims,
    batch_dim_fixed,
    missing_config_input,
    warmup_batch_too_big,
    dynamic_batching_without_batch,
    warmup_dims_not_the_inputs,
    warmup_lacks_an_input,
    warmup_file_too_short,
    reshape_without_dims,
    corrupt_onnx,
    empty_repo,
    path_missing,
    not_a_model_file,
]


def test_at_least_25_distinct_bad_inputs() -> None:
    assert len({c.__name__ for c in CASES}) >= 25


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_bad_input_fails_with_one_line_reason(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, spec = case(tmp_path)
    options = [s for s in spec if s.startswith("--")]
    args = []
    for opt in options:
        args += [opt, spec[spec.index(opt) + 1]]
    expected = [s for s in spec if s not in args]
    code, out = run_validate(capsys, str(target), *args)
    assert code == 1, out
    assert "Traceback" not in out
    summary = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert len(summary) == 1, out
    data = json.loads(run_validate(capsys, str(target), "--json", "-", *args)[1])
    assert data["ok"] is False
    errors = [p for p in data["problems"] if p["severity"] == "error"]
    text = " ".join(f"{p['code']} {p['message']}" for p in errors)
    for needle in expected:
        assert needle in text, text
    assert all("\n" not in p["message"] for p in errors)


def test_python_dash_m_gives_no_traceback(tmp_path: Path) -> None:
    bad = make_tar(tmp_path / "m.tar.gz", [member("../evil", b"x")])
    proc = subprocess.run(
        [sys.executable, "-m", "mmelocal", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "archive.unsafe" in proc.stdout


def test_the_unpacked_limit_is_a_size_as_every_command_reads_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--max-unpacked-bytes`` takes ``1MiB`` or ``10MB`` like every other size option
    (docs/cli.md: every command reads sizes with parse_size_bytes), and shows its default
    in a unit."""
    bomb, _ = zip_bomb(tmp_path)  # 5,000,000 bytes unpacked
    code, out = run_validate(capsys, str(bomb), "--max-unpacked-bytes", "1MiB")
    assert code == 1 and f"more than {1024**2} bytes" in out, out
    code, out = run_validate(capsys, str(bomb), "--max-unpacked-bytes", "10MB")
    assert "archive.unsafe" not in out and "config.missing" in out, out
    code, out = run_validate(capsys, str(bomb), "--max-unpacked-bytes", "4G")
    assert code == 2 and "ambiguous" in out, out
    main(["validate", "--help"])
    assert "[default: 64GiB]" in " ".join(capsys.readouterr().out.split())


def test_torchscript_inputs_checked(tmp_path: Path) -> None:
    torch: Any = pytest.importorskip("torch")
    from mmelocal.builder.model_config import build_model_config
    from mmelocal.builder.repository import add_model
    from mmelocal.builder.tensors import Signature, TensorSpec

    class Two(torch.nn.Module):
        def forward(self, input_ids, attention_mask):  # type: ignore[no-untyped-def]
            return input_ids * attention_mask

    pt = tmp_path / "two.pt"
    with pytest.warns(Warning):
        torch.jit.trace(Two(), (torch.ones(2, 3), torch.ones(2, 3))).save(str(pt))
    spec = TensorSpec("input_ids", "TYPE_FP32", (3,))
    cases = {
        "ok": ((spec, TensorSpec("attention_mask", "TYPE_FP32", (3,))), None),
        "indexed": (
            (TensorSpec("INPUT__0", "TYPE_FP32", (3,)), TensorSpec("INPUT__1", "TYPE_FP32", (3,))),
            None,
        ),
        "count": ((spec,), "io.input_count"),
        "names": ((spec, TensorSpec("mask", "TYPE_FP32", (3,))), "io.input_order"),
        # the backend reads the index after the first "__": these are not indexed names,
        # so Triton takes them in config order (in__a__1 is forward's first argument)
        "first_separator": (
            (TensorSpec("in__a__1", "TYPE_FP32", (3,)), TensorSpec("in__a__0", "TYPE_FP32", (3,))),
            "io.input_order",
        ),
    }
    for name, (inputs, code) in cases.items():
        sig = Signature(inputs, (TensorSpec("OUTPUT__0", "TYPE_FP32", (3,)),))
        cfg = build_model_config(name=name, platform="pytorch_libtorch", signature=sig)
        model = add_model(tmp_path / "repo", name=name, config=cfg, artifact=pt)
        report = validate_path(model)
        codes = [p.code for p in report.problems]
        if code == "io.input_order":
            # Triton falls back to the config's order (input i is forward argument i)
            assert report.ok and code in codes, (name, report.problems)
        elif code:
            assert code in codes, (name, report.problems)
        else:
            assert report.ok and "io.unchecked_ranks" in codes, (name, report.problems)


def test_what_triton_serves_is_not_an_error(tmp_path: Path) -> None:
    """Configs Triton loads are warnings at most: dynamic batching with max_batch_size 0
    (the batcher runs with batches of one), and a warmup sample of batch_size 0 (skipped)."""
    model = _model(
        tmp_path,
        inputs=(("x", FLOAT, (1, 4)),),
        outputs=(("y", FLOAT, (1, 4)),),
        options=ConfigOptions(max_batch_size=0, dynamic_batching=False),
    )
    text = (model / "config.pbtxt").read_text()
    text = text.replace("batch_size: 1", "batch_size: 0")
    (model / "config.pbtxt").write_text(text + "dynamic_batching {\n}\n")
    report = validate_path(model)
    assert report.ok, report.problems
    codes = {p.code for p in report.problems if p.severity == "warning"}
    assert {"config.batching", "config.warmup"} <= codes, report.problems
    (model / "config.pbtxt").write_text(
        text + "dynamic_batching {\n  preferred_batch_size: [2]\n}\n"
    )
    report = validate_path(model)
    assert [p.code for p in report.errors] == ["config.batching"], report.problems


def test_only_the_versions_the_policy_loads_are_checked(tmp_path: Path) -> None:
    """Triton loads the version folders its version_policy picks (default: the latest one)
    and fails the load when the policy picks none; the other folders are never read."""
    model = _model(tmp_path)
    (model / "1").rename(model / "2")
    (model / "1").mkdir()  # an old, emptied version
    config = model / "config.pbtxt"
    text = config.read_text()
    report = validate_path(model)
    assert report.ok, report.problems
    assert "layout.unloaded_version" in {p.code for p in report.problems}
    config.write_text(text + "version_policy {\n  all {\n  }\n}\n")
    assert [p.code for p in validate_path(model).errors] == ["artifact.missing"]
    config.write_text(text + "version_policy {\n  specific {\n    versions: [3]\n  }\n}\n")
    report = validate_path(model)
    assert [p.code for p in report.errors] == ["layout.no_version"], report.problems
    assert "version_policy" in report.errors[0].message


def test_torchscript_with_one_dict_input_takes_any_named_inputs(tmp_path: Path) -> None:
    """forward(self, inputs: Dict[str, Tensor]): the PyTorch backend passes every config
    input into the dict by name (is_dict_input), so two config inputs for one argument
    load; validate refused them (io.input_count)."""
    torch: Any = pytest.importorskip("torch")
    from mmelocal.builder.model_config import build_model_config
    from mmelocal.builder.repository import add_model
    from mmelocal.builder.tensors import Signature, TensorSpec

    class Sum(torch.nn.Module):
        def forward(self, inputs):  # type: ignore[no-untyped-def]
            return inputs["a"] + inputs["b"]

    pt = tmp_path / "dict.pt"
    ones = torch.ones(2, 3)
    with pytest.warns(Warning):
        torch.jit.trace(Sum(), ({"a": ones, "b": ones},), strict=False).save(str(pt))
    sig = Signature(
        (TensorSpec("a", "TYPE_FP32", (3,)), TensorSpec("b", "TYPE_FP32", (3,))),
        (TensorSpec("OUTPUT__0", "TYPE_FP32", (3,)),),
    )
    cfg = build_model_config(name="dict", platform="pytorch_libtorch", signature=sig)
    report = validate_path(add_model(tmp_path / "repo", name="dict", config=cfg, artifact=pt))
    assert report.ok, report.problems


def test_an_ensemble_is_checked_against_its_steps_beside_it(tmp_path: Path) -> None:
    """The steps' configs next to the ensemble (where Triton loads them from) are read:
    an input_map key the step does not have is Triton's load error, whether the ensemble
    folder or its repository is validated (tests/runtime/test_ensemble_checks.py has
    tritonserver judge each case)."""
    step = _model(tmp_path)  # ONNX "tiny": x FP32 [4] -> y FP32 [4], max_batch_size 8
    ens = step.parent / "ens"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text(
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "tiny" model_version: -1 '
        'input_map { key: "z" value: "IN" } output_map { key: "y" value: "OUT" } } ] }\n'
    )
    for target in (ens, step.parent):
        report = validate_path(target)
        found = [p.message for p in report.errors if p.code == "ensemble.invalid"]
        assert [m.split(";")[0] for m in found] == [
            "in ensemble ens, ensemble tensor IN is mapping to non-existing input z in model tiny",
            "in ensemble ens, input x in model tiny is not mapped to any ensemble tensors",
        ]
        assert not [p for p in report.errors if p.code != "ensemble.invalid"]
    text = (ens / "config.pbtxt").read_text().replace('key: "z"', 'key: "x"')
    (ens / "config.pbtxt").write_text(text)
    assert validate_path(step.parent).ok


def test_an_ensemble_step_with_no_folder_is_triton_s_load_error(tmp_path: Path) -> None:
    """A step whose model has no folder beside the ensemble fails the ensemble's load with
    Triton's words (tests/runtime/test_ensemble_checks.py has tritonserver say them); in a
    tarball the layout check reports it once, as layout.missing_step."""
    step = _model(tmp_path)
    ens = step.parent / "ens"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text(
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "gone" model_version: -1 '
        'input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } } ] }\n'
    )
    for target in (ens, step.parent):
        report = validate_path(target)
        assert [(p.code, p.message) for p in report.errors] == [
            (
                "ensemble.invalid",
                "ensemble ens contains models that are not available or ambiguous: gone; "
                "Triton fails the ensemble's load",
            )
        ]
    tar = tmp_path / "ens.tar.gz"
    with tarfile.open(tar, "w:gz") as archive:
        archive.add(ens, arcname="ens")
        archive.add(step, arcname="tiny")
    codes = [p.code for p in validate_path(tar).errors]
    assert codes == ["layout.missing_step"]


def test_an_unparsable_ensemble_in_a_tarball_is_reported_once(tmp_path: Path) -> None:
    """An ensemble whose config does not parse was reported twice: by the layout check
    (which reads its steps, naming the temporary folder it was extracted to) and by the
    folder's own check. The folder's check says it, once, with the line."""
    ens = tmp_path / "ens"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text(
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\nbogus_field: 3\n'
    )
    tar = tmp_path / "ens.tar.gz"
    with tarfile.open(tar, "w:gz") as archive:
        archive.add(ens, arcname="ens")
    for target in (tar, tmp_path):  # the tarball, and a store holding it
        if target == tmp_path:
            import shutil

            shutil.rmtree(ens)
        report = validate_path(target)
        found = [(p.path, p.message) for p in report.errors]
        assert found == [
            (
                "ens.tar.gz:ens/config.pbtxt",
                "line 4: field 'bogus_field': Message type \"inference.ModelConfig\" has no "
                'field named "bogus_field". (column 1)',
            )
        ], found
