"""package_model and package_copies: hard links, fallbacks, idempotent re-runs."""

from __future__ import annotations

import errno
import os
import tarfile
from pathlib import Path

import pytest
from builder_factories import make_onnx_model_dir

from mmelocal.builder import package as package_mod
from mmelocal.builder.package import disk_usage_bytes, package_copies, package_model
from mmelocal.cli.main import main
from mmelocal.errors import UserInputError


@pytest.fixture
def model(tmp_path: Path) -> Path:
    m = make_onnx_model_dir(tmp_path / "repo", "tiny")
    (m / "1" / "weights.bin").write_bytes(os.urandom(300_000))
    return m


def test_package_model(tmp_path: Path, model: Path) -> None:
    out = package_model(model, tmp_path / "out")
    assert out == tmp_path / "out" / "model.tar.gz"
    assert out.read_bytes()[:2] == b"\x1f\x8b"


def test_copies_are_hard_links_costing_one_copy(tmp_path: Path, model: Path) -> None:
    methods: list[str] = []
    paths = package_copies(
        model, tmp_path / "out", copies=50, on_copy=lambda i, p, m: methods.append(m)
    )
    assert [p.name for p in paths[:3]] == ["model-0.tar.gz", "model-1.tar.gz", "model-2.tar.gz"]
    assert paths[-1].name == "model-49.tar.gz"
    assert methods == ["packaged"] + ["hardlink"] * 49
    assert len({p.stat().st_ino for p in paths}) == 1
    one = paths[0].stat().st_blocks * 512
    assert disk_usage_bytes(paths) == one


def test_rerun_is_idempotent_and_accepts_a_tarball(tmp_path: Path, model: Path) -> None:
    tar = package_model(model, tmp_path / "src")
    out = tmp_path / "out"
    first = package_copies(tar, out, copies=5, prefix="bert-")
    second = package_copies(tar, out, copies=5, prefix="bert-")
    assert first == second
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in first)
    assert {p.stat().st_ino for p in second} == {tar.stat().st_ino}
    (out / "bert-3.tar.gz").unlink()
    (out / "bert-3.tar.gz").write_bytes(b"stale")
    package_copies(tar, out, copies=5, prefix="bert-")
    assert (out / "bert-3.tar.gz").read_bytes() == tar.read_bytes()


def test_fallback_when_links_are_refused(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(package_mod.os, "link", refuse)
    methods: list[str] = []
    paths = package_copies(
        model, tmp_path / "out", copies=3, on_copy=lambda i, p, m: methods.append(m)
    )
    assert methods[0] == "packaged"
    assert set(methods[1:]) <= {"reflink", "copy"}
    data = paths[0].read_bytes()
    assert all(p.read_bytes() == data for p in paths)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"copies": 0}, "copies must be >= 1"),
        ({"copies": 100_001}, "copies must be >= 1 and <= 100000"),
        ({"copies": 2, "prefix": "a/b"}, "prefix"),
        ({"copies": 2, "prefix": ".."}, "prefix"),
        ({"copies": 2, "prefix": "a\x00b"}, "prefix"),
        ({"copies": 2, "prefix": "a\nb"}, "prefix"),
    ],
)
def test_bad_arguments(tmp_path: Path, model: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(UserInputError, match=match):
        package_copies(model, tmp_path / "out", **kwargs)


def test_out_dir_that_is_a_file_is_refused_and_kept(tmp_path: Path, model: Path) -> None:
    out = tmp_path / "out"
    out.write_text("keep me")
    with pytest.raises(UserInputError, match="is a file"):
        package_model(model, out)
    with pytest.raises(UserInputError, match="is a file"):
        package_copies(model, out, copies=2)
    with pytest.raises(UserInputError, match="cannot create the output folder"):
        package_copies(model, out / "sub", copies=2)
    assert out.read_text() == "keep me"


def test_cli_package_bad_inputs_one_line_exit_2(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("keep me")
    cases = [
        ["--out", str(tmp_path / "file")],
        ["--out", str(tmp_path / "o"), "--copies", "100000000000"],
        ["--out", str(tmp_path / "o"), "--copies", "2", "--prefix", "../x"],
        ["--out", str(model)],
    ]
    for args in cases:
        capsys.readouterr()
        assert main(["package", str(model), *args]) == 2, args
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.strip(), args
    assert (tmp_path / "file").read_text() == "keep me"
    assert not list(model.rglob("*.tar.gz"))


def test_a_repository_is_not_packaged_as_a_model(tmp_path: Path, model: Path) -> None:
    repo = model.parent
    # one model in it is unambiguous (SageMaker serves the only folder): seed layout
    one = package_model(repo, tmp_path / "one")
    with tarfile.open(one) as tar:
        assert {m.name.split("/")[0] for m in tar.getmembers()} == {model.name}
    make_onnx_model_dir(repo, "tiny2")
    with pytest.raises(UserInputError, match="is a model repository; package one of"):
        package_model(repo, tmp_path / "out")
    with pytest.raises(UserInputError, match=f"{model.name}"):
        package_copies(repo, tmp_path / "out", copies=2)
    assert not (tmp_path / "out").exists()


def test_a_pipe_is_not_packaged(tmp_path: Path) -> None:
    import os

    pipe = tmp_path / "model.tar.gz"
    os.mkfifo(pipe)
    with pytest.raises(UserInputError, match="neither a model folder nor a file"):
        package_copies(pipe, tmp_path / "out", copies=2)
    assert not (tmp_path / "out").exists()


def test_not_gzip_input(tmp_path: Path) -> None:
    p = tmp_path / "x.tar.gz"
    p.write_text("no")
    with pytest.raises(UserInputError, match="not a gzip file"):
        package_copies(p, tmp_path / "out", copies=2)


def test_cli_package(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["package", str(model), "--out", str(tmp_path / "o"), "--copies", "4"]) == 0
    out = capsys.readouterr().out
    assert "hardlink x3" in out
    assert (tmp_path / "o" / "model-3.tar.gz").is_file()
    assert main(["package", str(model), "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "model.tar.gz").is_file()
    (model / "config.pbtxt").write_text("bogus: 1\n")
    assert main(["package", str(model), "--out", str(tmp_path / "q")]) == 1
    assert "config.invalid" in capsys.readouterr().out
    assert not (tmp_path / "q").exists()
    assert main(["package", str(tmp_path / "nope"), "--out", str(tmp_path / "q")]) == 2


def test_root_layout_and_ensemble_are_repacked_in_the_seed_layout(
    tmp_path: Path, model: Path
) -> None:
    root_tar = tmp_path / "root.tar.gz"
    with tarfile.open(root_tar, "w:gz") as tar:
        for child in model.iterdir():
            tar.add(child, arcname=child.name)
    repacked = package_model(root_tar, tmp_path / "a")
    with tarfile.open(repacked) as tar:
        names = tar.getnames()
    assert "tiny/config.pbtxt" in names and "config.pbtxt" not in names
    repo = tmp_path / "ens"
    step = make_onnx_model_dir(repo, "step")
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'ensemble_scheduling { step [ { model_name: "step" model_version: -1 } ] }\n'
    )
    (repo / "unused").mkdir()
    packed = package_model(repo, tmp_path / "b")
    with tarfile.open(packed) as tar:
        tops = {m.name.split("/")[0] for m in tar.getmembers()}
    assert tops == {"ens", step.name}


def test_a_model_folder_given_through_a_symlink_is_packed_as_a_folder(
    tmp_path: Path, model: Path
) -> None:
    """``repo/bert -> /data/bert``: the archive's top-level entry is the folder itself; it was
    the symlink (to an absolute path of this machine), which SageMaker's Triton does not list
    as a model folder and safe_extract refuses."""
    from mmelocal.builder.validate import validate_path

    link = tmp_path / "links" / "tiny"
    link.parent.mkdir()
    link.symlink_to(model.resolve(), target_is_directory=True)
    out = package_model(link, tmp_path / "out")
    with tarfile.open(out) as tar:
        top = tar.getmembers()[0]
    assert top.name == "tiny" and top.isdir()
    report = validate_path(out)
    assert report.ok, report.problems


def test_an_ensemble_folder_is_packed_with_the_steps_beside_it(tmp_path: Path) -> None:
    """``mmelocal package repo/ens``: the ensemble folder has its config at its root, so it
    was packed alone, and SageMaker's Triton then fails the load (its steps load from the
    same archive, by folder name). Its steps are taken from beside it, as Triton loads
    them from the repository; a step with no folder there is refused by name."""
    from mmelocal.builder.validate import validate_path

    repo = tmp_path / "repo"
    step = make_onnx_model_dir(repo, "step")  # x FP32 [4] -> y FP32 [4]
    make_onnx_model_dir(repo, "other")
    ens = repo / "ens"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text(
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "step" model_version: -1 '
        'input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } } ] }\n'
    )
    packed = package_model(ens, tmp_path / "out")
    with tarfile.open(packed) as tar:
        tops = {m.name.split("/")[0] for m in tar.getmembers()}
    assert tops == {"ens", step.name}
    report = validate_path(packed)
    assert report.ok, report.problems
    import shutil

    shutil.rmtree(step)
    with pytest.raises(UserInputError, match=r"'step'.*no folder"):
        package_model(ens, tmp_path / "out2")


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_tarball_gets_the_users_default_mode(tmp_path: Path, model: Path, umask: int) -> None:
    """Like any file the user creates (0666 less the umask); it was 0600 (tempfile's)."""
    old = os.umask(umask)
    try:
        paths = [package_model(model, tmp_path / "one")]
        paths += package_copies(model, tmp_path / "many", copies=2)
    finally:
        os.umask(old)
    assert {oct(p.stat().st_mode & 0o777) for p in paths} == {oct(0o666 & ~umask)}


def test_a_refusal_offers_no_validate_only_where_it_would_package(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The packager itself must parse the config: for a config it cannot read, "pass
    --no-validate" was a dead end (that run fails too). The line now says what works."""
    config = model / "config.pbtxt"
    text = config.read_text()
    config.write_text(text.replace('name: "tiny"', 'name: "other"'))  # a check's finding only
    assert main(["package", str(model), "--out", str(tmp_path / "a")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "--no-validate" in err
    assert main(["package", str(model), "--out", str(tmp_path / "a"), "--no-validate"]) == 0
    capsys.readouterr()
    config.write_text(text + "bogus_field: 1\n")  # the packager cannot read it either
    assert main(["package", str(model), "--out", str(tmp_path / "b")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "--no-validate would not help" in err, err
    assert main(["package", str(model), "--out", str(tmp_path / "b"), "--no-validate"]) == 2
    assert not (tmp_path / "b").exists()
