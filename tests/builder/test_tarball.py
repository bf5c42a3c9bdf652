"""create_model_tarball and safe_extract: determinism, layout, and hostile archives."""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

import pytest
from builder_factories import make_onnx_model_dir, make_tar, member, snapshot

from mmelocal.builder.tarball import BadArchiveError, create_model_tarball, safe_extract
from mmelocal.errors import UnsafeArchiveError, UserInputError


@pytest.fixture
def model(tmp_path: Path) -> Path:
    m = make_onnx_model_dir(tmp_path / "repo", "tiny")
    (m / "1" / "run.sh").write_text("#!/bin/sh\n")
    (m / "1" / "run.sh").chmod(0o775)
    return m


def test_tarball_has_model_folder_at_top_and_round_trips(tmp_path: Path, model: Path) -> None:
    tar_path = create_model_tarball(model, tmp_path / "out" / "model.tar.gz")
    with tarfile.open(tar_path) as tar:
        names = tar.getnames()
        assert names[0] == "tiny"
        assert all(n == "tiny" or n.startswith("tiny/") for n in names)
        assert {m.uid for m in tar.getmembers()} == {0}
    dest = safe_extract(tar_path, tmp_path / "x")
    for src in model.rglob("*"):
        out = dest / "tiny" / src.relative_to(model)
        assert out.exists()
        if src.is_file():
            assert out.read_bytes() == src.read_bytes()
    assert os.access(dest / "tiny" / "1" / "run.sh", os.X_OK)
    assert oct((dest / "tiny" / "config.pbtxt").stat().st_mode & 0o777) == "0o644"


def test_tarball_is_deterministic(tmp_path: Path, model: Path) -> None:
    a = create_model_tarball(model, tmp_path / "a.tar.gz")
    os.utime(model / "config.pbtxt", (1_000_000, 1_000_000))
    b = create_model_tarball(model, tmp_path / "b.tar.gz")
    assert a.read_bytes() == b.read_bytes()


def test_refuses_non_empty_dest_unless_overwrite(tmp_path: Path, model: Path) -> None:
    tar_path = create_model_tarball(model, tmp_path / "m.tar.gz")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "old").write_text("old")
    with pytest.raises(UserInputError, match="not empty"):
        safe_extract(tar_path, dest)
    safe_extract(tar_path, dest, overwrite=True)
    assert sorted(p.name for p in dest.iterdir()) == ["tiny"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _raw_tar_with_declared_size(path: Path, declared: int) -> Path:
    info = tarfile.TarInfo("tiny/big")
    info.size = declared
    raw = info.tobuf(tarfile.GNU_FORMAT) + b"x" * 512 + b"\0" * 1024
    path.write_bytes(gzip.compress(raw))
    return path


def test_lying_size_header_is_refused_before_writing(tmp_path: Path) -> None:
    p = _raw_tar_with_declared_size(tmp_path / "m.tar.gz", 2**40)
    with pytest.raises(UnsafeArchiveError, match="max_unpacked_bytes"):
        safe_extract(p, tmp_path / "dest")
    p = _raw_tar_with_declared_size(tmp_path / "n.tar.gz", 4096)
    with pytest.raises(BadArchiveError, match="corrupt or truncated"):
        safe_extract(p, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_member_limit_and_size_limit(tmp_path: Path) -> None:
    many = make_tar(tmp_path / "many.tar.gz", [member(f"t/f{i}", b"x") for i in range(11)])
    with pytest.raises(UnsafeArchiveError, match="more than 10 members"):
        safe_extract(many, tmp_path / "d1", max_members=10)
    safe_extract(many, tmp_path / "d2", max_members=12)
    bomb = make_tar(
        tmp_path / "bomb.tar.gz", [member(f"t/z{i}", b"\0" * 400_000) for i in range(3)]
    )
    with pytest.raises(UnsafeArchiveError, match="more than 1000000 bytes"):
        safe_extract(bomb, tmp_path / "d3", max_unpacked_bytes=1_000_000)


def test_links_inside_the_archive_are_allowed(tmp_path: Path) -> None:
    members = [
        member("t/", type_=tarfile.DIRTYPE),
        member("t/a", b"data"),
        member("t/sym", type_=tarfile.SYMTYPE, linkname="a"),
        member("t/hard", type_=tarfile.LNKTYPE, linkname="t/a"),
    ]
    dest = safe_extract(make_tar(tmp_path / "m.tar.gz", members), tmp_path / "d")
    assert (dest / "t" / "sym").read_text() == "data"
    assert (dest / "t" / "hard").stat().st_ino == (dest / "t" / "a").stat().st_ino


def _hostile(tmp_path: Path, outside: Path) -> dict[str, list]:
    good = [member("tiny/", type_=tarfile.DIRTYPE), member("tiny/config.pbtxt", b"name: 'x'")]
    return {
        "dotdot": [*good, member("../victim.txt", b"pwned")],
        "deep_dotdot": [*good, member("tiny/../../victim.txt", b"pwned")],
        "absolute": [*good, member(str(outside), b"pwned")],
        "symlink_then_write": [
            *good,
            member("tiny/l", type_=tarfile.SYMTYPE, linkname="../.."),
            member("tiny/l/victim.txt", b"pwned"),
        ],
        "symlink_to_root_then_write": [
            member("l", type_=tarfile.SYMTYPE, linkname="."),
            member("l/../victim.txt", b"pwned"),
        ],
        "symlink_chain": [
            member("d", type_=tarfile.SYMTYPE, linkname="."),
            member("s", type_=tarfile.SYMTYPE, linkname="d/.."),
            member("s/victim.txt", b"pwned"),
        ],
        "absolute_symlink": [
            *good,
            member("tiny/abs", type_=tarfile.SYMTYPE, linkname=str(outside.parent)),
        ],
        "hardlink_outside": [
            *good,
            member("tiny/h", type_=tarfile.LNKTYPE, linkname="../victim.txt"),
        ],
        "device": [*good, member("tiny/sda", type_=tarfile.BLKTYPE)],
        "fifo": [*good, member("tiny/pipe", type_=tarfile.FIFOTYPE)],
        "duplicate": [*good, member("tiny/config.pbtxt", b"again")],
    }


def test_hostile_archives_write_nothing_outside(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    victim = parent / "victim.txt"
    victim.write_text("safe")
    outside = tmp_path / "outside.txt"
    archives = tmp_path / "archives"
    archives.mkdir()
    for name, members in _hostile(tmp_path, outside).items():
        tar_path = make_tar(archives / f"{name}.tar.gz", members)
        before = snapshot(parent)
        with pytest.raises(UnsafeArchiveError):
            safe_extract(tar_path, parent / "dest")
        assert snapshot(parent) == before, name
        assert victim.read_text() == "safe", name
        assert not outside.exists(), name


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "not a gzip file"),
        (b"PK\x03\x04 a zip file", "not a gzip file"),
        (b"\x1f\x8b\x08\x00garbage-garbage-garbage", "corrupt or truncated"),
        (gzip.compress(b"not a tar" * 100, mtime=0), "corrupt or truncated"),
    ],
    # Named ids: pytest-xdist workers must collect the same names, and raw bytes make poor ones.
    ids=["empty", "zip", "bad-gzip", "gzip-not-tar"],
)
def test_bad_files_give_clear_errors(tmp_path: Path, content: bytes, match: str) -> None:
    p = tmp_path / "m.tar.gz"
    p.write_bytes(content)
    with pytest.raises(BadArchiveError, match=match):
        safe_extract(p, tmp_path / "d")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.tar.gz"]


def test_truncated_and_bit_flipped_gzip(tmp_path: Path, model: Path) -> None:
    full = create_model_tarball(model, tmp_path / "full.tar.gz").read_bytes()
    for i, data in enumerate([full[:-7], full[: len(full) // 2], full[:-30] + b"\0" * 30]):
        p = tmp_path / f"t{i}.tar.gz"
        p.write_bytes(data)
        with pytest.raises(BadArchiveError):
            safe_extract(p, tmp_path / f"d{i}")
        assert not (tmp_path / f"d{i}").exists()


def test_tarball_not_inside_the_model(model: Path) -> None:
    with pytest.raises(UserInputError, match="must not be written inside the model folder"):
        create_model_tarball(model, model / "model.tar.gz")


def test_missing_archive(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="archive not found"):
        safe_extract(tmp_path / "nope.tar.gz", tmp_path / "d")
