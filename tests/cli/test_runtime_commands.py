"""``mmelocal check`` and ``mmelocal triton``: bad inputs end in one line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().lower().startswith("error")]


def test_check_bad_inputs_give_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MMELOCAL_STATE_DIR", str(tmp_path / "state"))
    not_a_binary = tmp_path / "notes.txt"
    not_a_binary.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases: list[tuple[list[str], int, str]] = [
        (["check", str(empty)], 1, "no model folder"),
        (["check", str(tmp_path / "missing")], 1, "does not exist"),
        (["check", str(not_a_binary)], 1, "not a gzip file"),
        (["check", str(empty), "--launcher", "external"], 2, "HTTP address (mmelocal check --url"),
        (["check", str(empty), "--load-timeout", "0"], 2, "--load-timeout"),
        (["check", str(empty), "--atol", "-1"], 2, "atol and rtol must be >= 0"),
        (["triton", "stop", "--timeout", "-1"], 2, "--timeout"),
        (["triton", "start", "--repo", str(not_a_binary)], 2, "is a file"),
        (["triton", "start", "--repo", str(empty), "--name", "../x"], 2, "simple word"),
    ]
    for args, code, reason in cases:
        got, text = run(capsys, *args)
        assert got == code and "Traceback" not in text, (args, text)
        lines = error_lines(text)
        assert lines and reason in lines[-1], (args, text)


def test_check_model_errors_give_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, refused_port: int
) -> None:
    """Failures found once the repository is valid: a server that is not there, a binary
    that is not one."""
    model = tmp_path / "repo" / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (model / "config.pbtxt").write_text(
        'name: "m"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "IN", data_type: TYPE_FP32, dims: [1] }]\n'
        'output [{ name: "OUT", data_type: TYPE_FP32, dims: [1] }]\n'
    )
    not_a_binary = tmp_path / "notes.txt"
    not_a_binary.write_text("x")
    for args, reason in [
        (
            ["--launcher", "external", "--url", f"http://127.0.0.1:{refused_port}"],
            "nothing listens at",
        ),
        (["--tritonserver", str(not_a_binary)], "is not executable"),
        (["--launcher", "external", "--url", "foo"], "must start with http://"),
    ]:
        got, text = run(capsys, "check", str(tmp_path / "repo"), *args)
        assert got != 0 and "Traceback" not in text, (args, text)
        assert any(reason in line for line in error_lines(text)), (args, text)


def test_backends_option_ignores_empty_names() -> None:
    from mmelocal.cli.check import _backend_names

    assert _backend_names(None) is None and _backend_names(",, ") is None
    assert _backend_names(" python, onnxruntime,") == {"python", "onnxruntime"}


def test_launcher_options_for_another_launcher_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, held_port: int
) -> None:
    """``--url`` without ``--launcher external`` (and the like) used to be dropped without a
    word: check validated, then started the pip tritonserver instead of using the server."""
    empty = tmp_path / "empty"
    empty.mkdir()
    serve = ["serve", "--store", str(empty), "--port", str(held_port)]
    cases: list[tuple[list[str], str]] = [
        (["check", str(empty), "--url", "http://127.0.0.1:8000"], "--url"),
        (["check", str(empty), "--image", "nvcr.io/x"], "--image"),
        (
            ["check", str(empty), "--launcher", "docker", "--tritonserver", "/bin/x"],
            "--tritonserver",
        ),
        ([*serve, "--triton-url", "http://127.0.0.1:8080"], "--triton-url"),
        ([*serve, "--image", "nvcr.io/x"], "--image"),
    ]
    for args, flag in cases:
        got, text = run(capsys, *args)
        assert got == 2 and "Traceback" not in text, (args, text)
        lines = error_lines(text)
        assert lines and flag in lines[-1] and "--launcher" in lines[-1], (args, text)


def test_triton_start_repo_that_cannot_be_made_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--repo`` under a file: a NotADirectoryError traceback before (exit 1)."""
    monkeypatch.setenv("MMELOCAL_STATE_DIR", str(tmp_path / "state"))
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    got, text = run(capsys, "triton", "start", "--repo", str(a_file / "repo"))
    assert got == 2 and "Traceback" not in text, text
    lines = error_lines(text)
    assert lines and "cannot create the model repository" in lines[-1], text


@pytest.mark.parametrize(
    ("platform", "artifact"),
    [("pytorch_libtorch", "model.pt"), ("onnxruntime_onnx", "model.onnx")],
)
def test_triton_start_refuses_to_load_what_the_pip_server_cannot(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    platform: str,
    artifact: str,
) -> None:
    """``triton start --load`` of a TorchScript or ONNX model started a server whose load
    then failed with Triton's "unable to find backend library for backend 'pytorch'": the
    pip tritonserver has the Python backend only. It now refuses first, in one line, and
    says what runs the model (check, serve, or the Docker launcher)."""
    monkeypatch.setenv("MMELOCAL_STATE_DIR", str(tmp_path / "state"))
    repo = tmp_path / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "1" / artifact).write_bytes(b"x")
    (repo / "m" / "config.pbtxt").write_text(f'name: "m"\nplatform: "{platform}"\n')
    code, text = run(capsys, "triton", "start", "--repo", str(repo), "--load", "m")
    assert code == 2, text
    assert len(error_lines(text)) == 1, text
    words = " ".join(text.split())
    assert f"model 'm' is a {platform} model" in words, words
    assert "mmelocal check" in words and "mmelocal serve" in words and "--launcher docker" in words
    assert not list((tmp_path / "state").rglob("*.json"))  # no server was started
