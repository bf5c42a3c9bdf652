"""Pretrained weights for ``torchvision:`` and ``timm:`` models: which, and fetched how.

``weights`` is ``None``/``"none"`` (random weights, for capacity and latency work),
``"DEFAULT"`` (the library's recommended weights) or a name (``IMAGENET1K_V2`` for
torchvision, a pretrained tag such as ``a1_in1k`` for timm). Files come through the
libraries' own caches: torch hub's ``$TORCH_HOME/hub/checkpoints`` for URLs (what
torchvision and timm use) and the Hugging Face cache for timm's hub-hosted weights.

:func:`fetch_checkpoint` downloads a URL into torch hub's cache as
``torch.hub.download_url_to_file`` does (a ``.partial`` file, the SHA-256 prefix that
torchvision puts in its file names checked, and only then renamed: a failed or corrupt
download leaves nothing behind), but with a timeout on every read, so that a stalled
mirror fails the build instead of hanging it (``MMELOCAL_DOWNLOAD_TIMEOUT_S``, default
60 s, read at call time), and with no progress bar of its own (the CLI shows one).
``MMELOCAL_TORCHVISION_MIRROR`` (read at call time) replaces the host part of the URL by
a mirror that serves the same file names, as a corporate mirror of download.pytorch.org
does.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmelocal.builder.runners import import_torch
from mmelocal.errors import DownloadError, SourceError

MIRROR_ENV = "MMELOCAL_TORCHVISION_MIRROR"
TIMEOUT_ENV = "MMELOCAL_DOWNLOAD_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT = "DEFAULT"


def normalise_weights(weights: str | None) -> str | None:
    """``None`` for random weights, ``"DEFAULT"``, or the weights name as given."""
    if weights is None:
        return None
    text = str(weights).strip()
    if not text:
        raise SourceError("weights must be DEFAULT, none or a weights name, got ''")
    if text.lower() == "none":
        return None
    return DEFAULT if text.upper() == DEFAULT else text


def weights_note(label: str | None) -> str:
    """The build-output line saying which weights were used."""
    if label is None:
        return "random weights (--weights none); pass --weights DEFAULT for trained ones"
    return f"pretrained weights {label}"


def torchvision_weights(weights_enum: Any, weights: str, spec: str) -> Any:
    """The member of a torchvision weights enum named by ``weights`` (``DEFAULT`` or a name).

    ``ResNet50_Weights.IMAGENET1K_V2`` and ``IMAGENET1K_V2`` name the same member.
    """
    if weights == DEFAULT:
        return weights_enum.DEFAULT
    name = weights.rsplit(".", 1)[-1]
    names = [w.name for w in weights_enum]
    if name not in names:
        raise SourceError(
            f"{spec} has no weights {weights!r}; pass --weights with DEFAULT, none or one of "
            f"{', '.join(names)}",
            source=spec,
        )
    return weights_enum[name]


def checkpoint_url(url: str, environ: Mapping[str, str] | None = None) -> str:
    """``url``, or the same file name under ``$MMELOCAL_TORCHVISION_MIRROR`` when set."""
    env = os.environ if environ is None else environ
    mirror = (env.get(MIRROR_ENV) or "").strip().rstrip("/")
    if not mirror:
        return url
    return f"{mirror}/{checkpoint_name(url)}"


def checkpoint_name(url: str) -> str:
    """The file name torch hub caches ``url`` under."""
    return url.split("?", 1)[0].rsplit("/", 1)[-1]


def fetch_checkpoint(url: str, *, spec: str) -> Path:
    """``$TORCH_HOME/hub/checkpoints/<name>`` for ``url``, downloaded first when missing."""
    torch = import_torch("pretrained weights")
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    path = folder / checkpoint_name(url)
    if path.is_file():
        return path
    source = checkpoint_url(url)
    match = torch.hub.HASH_REGEX.search(path.name)
    prefix = match.group(1) if match else None
    folder.mkdir(parents=True, exist_ok=True)
    try:
        download(source, path, hash_prefix=prefix, timeout_s=download_timeout_s())
    except RuntimeError as exc:
        if "invalid hash" not in str(exc):
            raise
        raise DownloadError(
            f"{source} does not match the checksum in its name ({prefix}): the download or "
            f"the mirror ({MIRROR_ENV}) is corrupt; nothing was kept, run again",
            source=spec,
            url=source,
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        raise DownloadError(
            f"cannot download the weights of {spec} from {source} ({_reason(exc)}): check the "
            f"network or set {MIRROR_ENV} to a mirror, or copy the file to {path}, or pass "
            "--weights none for random weights",
            source=spec,
            url=source,
        ) from None
    return path


def download_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a download may wait for the next bytes (``$MMELOCAL_DOWNLOAD_TIMEOUT_S``)."""
    env = os.environ if environ is None else environ
    text = (env.get(TIMEOUT_ENV) or "").strip()
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if value <= 0:
        raise SourceError(f"{TIMEOUT_ENV} must be a number of seconds > 0, got {text!r}")
    return value


def download(url: str, path: Path, *, hash_prefix: str | None, timeout_s: float) -> None:
    """``url`` into ``path`` through a ``.partial`` file renamed when complete and checked
    (the SHA-256 must start with ``hash_prefix``); every read waits ``timeout_s`` at most."""
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
        found = digest.hexdigest()
        if hash_prefix and not found.startswith(hash_prefix):
            raise RuntimeError(f"invalid hash value (expected {hash_prefix!r}, got {found!r})")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
        return f"no data within {download_timeout_s():g} s ({TIMEOUT_ENV})"
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


__all__ = [
    "DEFAULT",
    "DEFAULT_TIMEOUT_S",
    "MIRROR_ENV",
    "TIMEOUT_ENV",
    "checkpoint_name",
    "checkpoint_url",
    "download",
    "download_timeout_s",
    "fetch_checkpoint",
    "normalise_weights",
    "torchvision_weights",
    "weights_note",
]
