"""A gzip reader that inflates on a helper thread (used by safe_extract).

``tar -xzf`` runs gzip and tar as two processes; this gives Python's single-pass tar
extraction the same overlap, because zlib releases the GIL while it inflates.
"""

from __future__ import annotations

import queue
import threading
import zlib
from typing import BinaryIO


class GunzipStream:
    """Read-only file object over a gzip file, inflated by a helper thread.

    zlib releases the GIL while inflating, so decompression overlaps with the tar parsing
    and file writes of the caller (as ``tar -xzf`` overlaps gzip and tar). zlib in gzip
    mode checks each member's CRC-32 and length; concatenated members are supported.
    """

    def __init__(self, raw: BinaryIO, *, chunk_bytes: int = 1 << 20, queue_chunks: int = 8) -> None:
        self._raw = raw
        self._chunk_bytes = chunk_bytes
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(queue_chunks)
        self._stop = threading.Event()
        self._buffer = b""
        self._offset = 0
        self._done = False
        self._thread = threading.Thread(target=self._inflate, name="mmelocal-gunzip", daemon=True)
        self._thread.start()

    def _inflate(self) -> None:
        try:
            inflater = zlib.decompressobj(31)
            while not self._stop.is_set():
                data = self._raw.read(self._chunk_bytes)
                if not data:
                    if not inflater.eof:
                        raise EOFError("compressed file ended before the end-of-stream marker")
                    break
                while data and not self._stop.is_set():
                    # bounded output per call: a small bomb never inflates all at once
                    out = inflater.decompress(data, self._chunk_bytes)
                    if out:
                        self._put(out)
                    if inflater.eof:
                        data = inflater.unused_data.lstrip(b"\x00")
                        if data:
                            inflater = zlib.decompressobj(31)
                    else:
                        data = inflater.unconsumed_tail
            self._put(None)
        except BaseException as exc:  # handed to the reading thread
            self._put(exc)

    def _put(self, item: bytes | BaseException | None) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _next_chunk(self) -> bool:
        if self._done:
            return False
        item = self._queue.get()
        if item is None:
            self._done = True
            return False
        if isinstance(item, BaseException):
            self._done = True
            raise item
        self._buffer, self._offset = item, 0
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` inflated bytes (all remaining when negative); b"" at the end."""
        parts: list[bytes] = []
        want = size if size >= 0 else float("inf")
        got = 0
        while got < want:
            if self._offset >= len(self._buffer) and not self._next_chunk():
                break
            take = int(min(want - got, len(self._buffer) - self._offset))
            parts.append(self._buffer[self._offset : self._offset + take])
            self._offset += take
            got += take
        return b"".join(parts)

    def drain(self) -> None:
        """Read to the end (so the trailer checks run)."""
        while self._offset < len(self._buffer) or self._next_chunk():
            self._offset = len(self._buffer)

    def close(self) -> None:
        """Stop the helper thread."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> GunzipStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["GunzipStream"]
