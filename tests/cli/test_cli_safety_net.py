"""The CLI's safety net: an operating-system error no mmelocal code turned into a
MmeLocalError (disk full, no permission, a port in use) ends in one line and a non-zero
exit, never a traceback; ``-vv`` shows the traceback too."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.cli.main import main


def _full_disk_file(tmp_path: Path) -> Path:
    """A path whose writes fail with ENOSPC, as on a full disk: a link to ``/dev/full``."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (Linux) to make a write fail with 'No space left'")
    link = tmp_path / "trace.csv"
    link.symlink_to("/dev/full")
    return link


def _make_trace(out: Path, *extra: str) -> list[str]:
    return [*extra, "traffic", "make", "--models", "2", "--rate", "1", "--duration", "5",
            "--out", str(out)]  # fmt: skip


def test_a_full_disk_ends_in_one_line_naming_the_error_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_make_trace(_full_disk_file(tmp_path)))
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 1, text
    assert "Traceback" not in text
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, captured.err
    assert "No space left on device" in errors[0] and "free" in errors[0], errors[0]


def test_a_file_in_the_way_names_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code = main(_make_trace(blocker / "trace.csv"))
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.out + captured.err
    [line] = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert str(blocker) in line, line


def test_verbose_debug_keeps_the_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_make_trace(_full_disk_file(tmp_path), "-vv"))
    captured = capsys.readouterr()
    assert code == 1
    assert "Traceback" in captured.err and "OSError" in captured.err
    assert any(line.startswith("error:") for line in captured.err.splitlines())
