"""What PyTorch's CUDA caching allocator reserves (``cudaMalloc``) for a list of tensors.

``nvidia-smi`` sees the allocator's segments, not the tensors in them. Loading a model puts
every parameter and buffer in its own block, in order, and frees none, so what a copy's
weights reserve follows from their sizes alone. :func:`reserved_bytes` replays those
allocations with the allocator's rules, taken from PyTorch's source
(``c10/cuda/CUDACachingAllocator.cpp``, the constants at its top and ``round_size``,
``get_allocation_size``, ``get_free_block``, ``should_split``; the same rules are described
in the PyTorch docs, "CUDA semantics: optimizing memory usage with
PYTORCH_CUDA_ALLOC_CONF"):

- every request is rounded up to a multiple of 512 bytes (``kMinBlockSize``);
- requests up to 1 MiB (``kSmallSize``) come from the small pool, whose segments are 2 MiB
  (``kSmallBuffer``);
- larger requests come from the large pool: below 10 MiB (``kMinLargeAlloc``) a new segment
  is 20 MiB (``kLargeBuffer``), from 10 MiB up the request rounded up to 2 MiB
  (``kRoundLarge``);
- a request takes the smallest free block that holds it (best fit) and splits it when what
  remains is at least 512 bytes (small pool) or more than 1 MiB (large pool); otherwise
  the whole block is used and its remainder is lost to it.

Pure arithmetic: no torch import.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(size: int) -> int:
    """A request rounded up to the allocator's 512-byte blocks."""
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def segment_size(size: int) -> int:
    """The ``cudaMalloc`` the allocator makes when no free block holds ``size``."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def reserved_bytes(sizes: Iterable[int]) -> int:
    """Bytes in segments after allocating ``sizes`` in order and freeing none."""
    free: dict[bool, list[int]] = {True: [], False: []}  # small pool?, sorted free blocks
    reserved = 0
    for raw in sizes:
        if raw <= 0:
            continue
        size = round_size(raw)
        small = size <= SMALL_SIZE
        pool = free[small]
        at = bisect.bisect_left(pool, size)
        if at < len(pool):
            block = pool.pop(at)
        else:
            block = segment_size(size)
            reserved += block
        remaining = block - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            bisect.insort(pool, remaining)
    return reserved


__all__ = [
    "LARGE_BUFFER",
    "MIN_BLOCK",
    "MIN_LARGE_ALLOC",
    "ROUND_LARGE",
    "SMALL_BUFFER",
    "SMALL_SIZE",
    "reserved_bytes",
    "round_size",
    "segment_size",
]
