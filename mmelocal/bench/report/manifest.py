"""Which files of a report folder the report wrote: ``.mmelocal-report.json`` lists them, so
that a report written again into the same folder removes the earlier report's files it
does not write again (stale plots and tables of results no longer in it) and nothing else:
a file the user put there, or one that a report did not write, stays."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

#: the list of the files the last report wrote into its folder
MANIFEST_NAME = ".mmelocal-report.json"


def earlier_files(out_dir: Path) -> set[str]:
    """The names of the files the last report wrote into ``out_dir`` (none when no report
    listed any, or the list cannot be read)."""
    try:
        names = json.loads((out_dir / MANIFEST_NAME).read_text("utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return {n for n in names if isinstance(n, str) and n and "/" not in n and n[0] != "."}


def replace_manifest(out_dir: Path, written: Iterable[Path], earlier: set[str]) -> None:
    """Record ``written`` as the report's files and remove those of ``earlier`` it did not
    write again."""
    names = sorted({p.name for p in written})
    (out_dir / MANIFEST_NAME).write_text(
        json.dumps({"files": names}, indent=1) + "\n", encoding="utf-8"
    )
    for name in sorted(earlier - set(names)):
        path = out_dir / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
            logger.info("removed %s: the earlier report's, not written again", path)


__all__ = ["MANIFEST_NAME", "earlier_files", "replace_manifest"]
