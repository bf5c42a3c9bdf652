"""GunzipStream: same bytes as gzip, bounded memory, clear errors."""

from __future__ import annotations

import gzip
import io
import os
import zlib

import pytest

from mmelocal.builder.gunzip import GunzipStream


def _read_all(data: bytes, size: int = 4096) -> bytes:
    with GunzipStream(io.BytesIO(data), chunk_bytes=1000) as g:
        parts = []
        while chunk := g.read(size):
            parts.append(chunk)
        return b"".join(parts)


def test_matches_gzip_including_concatenated_members() -> None:
    payload = os.urandom(50_000) + b"\0" * 100_000
    assert _read_all(gzip.compress(payload)) == payload
    assert _read_all(gzip.compress(b"abc") + gzip.compress(b"def"), size=1) == b"abcdef"
    with GunzipStream(io.BytesIO(gzip.compress(payload))) as g:
        assert g.read() == payload


def test_bomb_is_inflated_in_bounded_chunks() -> None:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = b"".join(c.compress(b"\0" * 65536) for _ in range(160)) + c.flush()
    with GunzipStream(io.BytesIO(data), chunk_bytes=65536) as g:
        sizes = []
        while chunk := g.read(65536):
            sizes.append(len(chunk))
            assert len(g._buffer) <= 65536  # each inflate call produced at most one chunk
    assert sum(sizes) == 160 * 65536


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (gzip.compress(b"x" * 10_000, mtime=0)[:-10], EOFError),
        (gzip.compress(b"x" * 10_000, mtime=0)[:-8] + b"\0\0\0\0\0\0\0\1", zlib.error),
        (gzip.compress(b"x", mtime=0) + b"trailing garbage", zlib.error),
        (b"\x1f\x8b\x08\x00" + b"\xff" * 64, zlib.error),
    ],
    # Named ids: pytest-xdist workers must collect the same names, and raw bytes make poor ones.
    ids=["truncated", "bad-trailer", "trailing-garbage", "bad-deflate"],
)
def test_errors_reach_the_reader(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        _read_all(data)
