"""Check that a report page renders: every image it references is a readable PNG."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser
from pathlib import Path


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources.append(dict(attrs).get("src") or "")


def open_every_png(html_path: Path) -> list[tuple[int, int]]:
    """Parse the page, decode every <img> (data URI or file) with PIL; return their sizes."""
    from PIL import Image

    parser = _Images()
    parser.feed(html_path.read_text("utf-8"))
    sizes = []
    for src in parser.sources:
        if src.startswith("data:image/png;base64,"):
            data = base64.b64decode(src.split(",", 1)[1])
        else:
            data = (html_path.parent / src).read_bytes()
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            assert image.format == "PNG"
            sizes.append(image.size)
    return sizes
