"""The caching-allocator replay against hand computations of PyTorch's rules
(``c10/cuda/CUDACachingAllocator.cpp``: 512 B blocks; <= 1 MiB from 2 MiB segments; 1-10 MiB
from 20 MiB segments; >= 10 MiB its own segment rounded to 2 MiB; best fit; a large block
splits only when more than 1 MiB remains)."""

from __future__ import annotations

from mmelocal.bench.estimate.allocator import reserved_bytes, round_size, segment_size

MIB = 1 << 20
KIB = 1 << 10


def test_small_requests_share_a_2_mib_segment() -> None:
    assert round_size(1) == 512 and round_size(513) == 1024
    assert reserved_bytes([100]) == 2 * MIB
    assert reserved_bytes([600 * KIB, 600 * KIB, 600 * KIB]) == 2 * MIB
    assert reserved_bytes([600 * KIB] * 4) == 4 * MIB  # 4 x 600 KiB > 2 MiB


def test_mid_requests_pack_into_20_mib_segments_by_best_fit() -> None:
    assert segment_size(9 * MIB) == 20 * MIB
    assert reserved_bytes([9 * MIB, 9 * MIB]) == 20 * MIB
    assert reserved_bytes([9 * MIB] * 3) == 40 * MIB  # 2 MiB left: no room for a third
    # BERT-base's 768 x 768 fp32 matrices: eight fill 18 MiB, the ninth opens a segment
    assert reserved_bytes([int(2.25 * MIB)] * 8) == 20 * MIB
    assert reserved_bytes([int(2.25 * MIB)] * 9) == 40 * MIB


def test_large_requests_get_their_own_rounded_segment_and_keep_small_remainders() -> None:
    assert segment_size(15 * MIB + 1) == 16 * MIB
    assert reserved_bytes([15 * MIB + 1]) == 16 * MIB
    # 19 MiB takes a 20 MiB segment; the 1 MiB left is not split off (it must exceed
    # 1 MiB), and a 512 KiB request goes to the small pool anyway
    assert reserved_bytes([19 * MIB, 512 * KIB]) == 22 * MIB
    # a 16 MiB request's segment is exactly 16 MiB: nothing is left for the 4 MiB one
    assert reserved_bytes([16 * MIB, 4 * MIB]) == 16 * MIB + 20 * MIB
