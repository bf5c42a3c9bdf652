"""Memory readings of a running Triton: host RSS of its process tree, GPU memory via NVML."""

from __future__ import annotations

import contextlib
import logging

logger = logging.getLogger(__name__)


def process_tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` and all its descendants (Python-backend stubs included)."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += int(process.memory_info().rss)
    return total


def gpu_used_bytes(index: int | None = None) -> int | None:
    """Used memory of GPU ``index`` (all GPUs summed when None); None without NVML/GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        indexes = range(count) if index is None else [index]
        return sum(
            int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used)
            for i in indexes
        )
    except Exception:
        logger.debug("NVML reading failed", exc_info=True)
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


__all__ = ["gpu_used_bytes", "process_tree_rss_bytes"]
