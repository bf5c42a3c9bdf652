"""Hugging Face hub names: fetch what a model needs into the hub cache, once.

Every hub name goes through :func:`fetch_hub_model`: the repository's file list picks
the files to fetch (:func:`choose_files`: ``config.json``, the tokenizer files and one
set of PyTorch weights, ``*.safetensors`` before ``*.bin``, never another framework's),
then ``huggingface_hub.snapshot_download`` fetches those files only. The client writes
each file to ``blobs/<etag>.incomplete`` and renames it when complete, so a download
that dies leaves nothing in the snapshot folder that a later build could load.

The environment is read at call time (``huggingface_hub`` reads its own copy at import
and would not see a later change): ``HF_ENDPOINT`` (a mirror), ``HF_HUB_CACHE`` /
``HF_HOME`` (the cache), ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``: cache only),
and ``HF_TOKEN`` (read by the client per request, as is a ``hf auth login`` token).
Hub failures become one-line :class:`~mmelocal.errors.SourceError` (no such model or
revision) or :class:`~mmelocal.errors.DownloadError` (network, access, cache) messages.
The client's own progress bars are off while mmelocal fetches (the library prints
nothing; the CLI shows its own progress, which the client's bars would cut through).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.builder.runners import first_line
from mmelocal.builder.sources.specs import is_vision_spec
from mmelocal.errors import AccessDeniedError, DownloadError, MissingDependencyError, SourceError

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
CONFIG_FILE = "config.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)
"""Files that hold a tokenizer's vocabulary (one of them is enough to build one)."""
_SIDE_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "merges.txt",
    "preprocessor_config.json",
)
# One set of weights, in the order transformers itself looks for them.
_WEIGHT_SETS = (
    ("model.safetensors",),
    ("model.safetensors.index.json", "model-*-of-*.safetensors"),
    ("pytorch_model.bin",),
    ("pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin"),
)
_OTHER_WEIGHTS = ("h5", "msgpack", "onnx", "ot", "tflite", "gguf", "pb")
_NETWORK_MODULES = ("httpx", "httpx2", "httpcore", "httpcore2", "requests", "urllib3")


@dataclass(frozen=True, kw_only=True)
class HubSettings:
    """Where the hub is and where its cache lives, as the environment says now."""

    endpoint: str
    cache_dir: Path
    offline: bool

    def __post_init__(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise SourceError(f"HF_ENDPOINT must be an http(s) URL, got {self.endpoint!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HubSettings:
        """Settings from ``environ`` (default: ``os.environ`` at the time of the call)."""
        env = os.environ if environ is None else environ
        cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
        if not cache:
            xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            cache = os.path.join(env.get("HF_HOME") or os.path.join(xdg, "huggingface"), "hub")
        offline = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            cache_dir=Path(os.path.expandvars(cache)).expanduser(),
            offline=offline.strip().upper() in ("1", "ON", "YES", "TRUE"),
        )


@dataclass(frozen=True, kw_only=True)
class HubSnapshot:
    """A model's files in the hub cache: the snapshot ``folder`` and how they got there."""

    repo_id: str
    folder: Path
    commit: str
    files: tuple[str, ...]
    downloaded: tuple[str, ...]
    endpoint: str | None

    @property
    def note(self) -> str:
        """One line for the build output: which commit, downloaded or from the cache."""
        where = f"{self.repo_id}@{self.commit[:12]}"
        if self.downloaded:
            return f"downloaded {len(self.downloaded)} file(s) of {where} from {self.endpoint}"
        return f"{where} from the Hugging Face cache ({self.folder.parent.parent.parent})"


def choose_files(names: Iterable[str], *, repo_id: str) -> tuple[str, ...]:
    """The files to fetch among ``names``: config, tokenizer and one set of PyTorch weights.

    Only top-level files count (sub-folders hold other runtimes' exports: onnx/, openvino/).
    """
    top = sorted({n for n in names if "/" not in n})
    if CONFIG_FILE not in top:
        raise SourceError(
            f"{repo_id} has no {CONFIG_FILE}, so it is not a transformers model; mmelocal "
            "builds transformers, torchvision:, timm: and .pt/.onnx sources",
            source=repo_id,
        )
    for patterns in _WEIGHT_SETS:
        if patterns[0] in top:
            weights = [n for n in top if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
            break
    else:
        others = ", ".join(n for n in top if "." in n and n.rsplit(".", 1)[1] in _OTHER_WEIGHTS)
        raise SourceError(
            f"{repo_id} has no PyTorch weights (model.safetensors or pytorch_model.bin)"
            + (f", only {others}" if others else "")
            + "; mmelocal exports PyTorch models",
            source=repo_id,
        )
    extra = [n for n in top if n in TOKENIZER_FILES or n in _SIDE_FILES]
    return (CONFIG_FILE, *extra, *weights)


def fetch_hub_model(repo_id: str, *, revision: str | None = None) -> HubSnapshot:
    """Make sure the files ``repo_id`` needs are in the hub cache; return their snapshot.

    Online, the hub is asked for the file list of ``revision`` (default branch if None)
    and the missing files are downloaded; when the hub cannot be reached, a complete
    cached copy is used. With ``HF_HUB_OFFLINE=1`` only the cache is read.
    """
    settings = HubSettings.from_env()
    hub = _import_hub()
    if settings.offline:
        return _from_cache(hub, repo_id, revision, settings, why="HF_HUB_OFFLINE is set")
    api = hub.HfApi(endpoint=settings.endpoint)
    try:
        info = api.model_info(repo_id, revision=revision)
        # a mirror may leave out the file list: ask for it
        names = [s.rfilename for s in info.siblings or ()] or api.list_repo_files(
            repo_id, revision=revision
        )
    except Exception as exc:
        if not _is_network_error(exc):
            raise translate_hub_error(exc, repo_id, revision, settings) from None
        logger.warning("%s cannot be reached (%s): looking in the cache", settings.endpoint, exc)
        try:
            return _from_cache(hub, repo_id, revision, settings, why="the hub cannot be reached")
        except DownloadError:
            raise translate_hub_error(exc, repo_id, revision, settings) from None
    files = choose_files(names, repo_id=repo_id)
    before = _snapshot_dir(settings, repo_id, str(info.sha))
    missing = tuple(f for f in files if not (before / f).is_file())
    try:
        with no_progress_bars(hub):
            folder = hub.snapshot_download(
                repo_id,
                revision=revision,
                cache_dir=str(settings.cache_dir),
                endpoint=settings.endpoint,
                allow_patterns=list(files),
            )
    except Exception as exc:
        raise translate_hub_error(exc, repo_id, revision, settings) from None
    return _checked(repo_id, Path(folder), files, missing, settings.endpoint)


def fetch_hub_file(
    repo_id: str, filenames: tuple[str, ...], *, spec: str, revision: str | None = None
) -> Path:
    """The first of ``filenames`` that ``repo_id`` has, fetched into the hub cache."""
    settings = HubSettings.from_env()
    hub = _import_hub()
    for filename in filenames:
        try:
            with no_progress_bars(hub):
                found = hub.hf_hub_download(
                    repo_id,
                    filename,
                    revision=revision,
                    cache_dir=str(settings.cache_dir),
                    endpoint=settings.endpoint,
                    local_files_only=settings.offline,
                )
            return Path(found)
        except _remote_missing(hub):
            continue  # the next name, or the error below
        except Exception as exc:
            if settings.offline and isinstance(exc, hub.errors.LocalEntryNotFoundError):
                continue
            raise translate_hub_error(exc, repo_id, revision, settings, spec=spec) from None
    why = "HF_HUB_OFFLINE is set" if settings.offline else f"{settings.endpoint} has none"
    raise DownloadError(
        f"none of {', '.join(filenames)} of {repo_id} is in the Hugging Face cache "
        f"({settings.cache_dir}) and {why}: run once with network, or pass --weights none",
        source=spec,
    )


def translate_hub_error(
    exc: Exception,
    repo_id: str,
    revision: str | None,
    settings: HubSettings,
    *,
    spec: str | None = None,
) -> Exception:
    """A one-line mmelocal error, saying what to do, for an error of the hub client."""
    errors = _import_hub().errors
    source = spec or repo_id
    where = settings.endpoint
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, errors.GatedRepoError) or (
        isinstance(exc, errors.HfHubHTTPError)
        and status in (401, 403)
        and not isinstance(exc, errors.RepositoryNotFoundError)
    ):
        token = "your token has no access" if status == 403 else "no token was sent"
        return AccessDeniedError(
            f"{repo_id} is gated or private on {where} and {token} (HTTP {status}): accept "
            f"its licence at {where}/{repo_id} with your account, then log in with "
            "`hf auth login` (huggingface-cli login) or set HF_TOKEN",
            source=source,
            url=where,
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return SourceError(
            f"{repo_id} has no revision {revision!r} on {where}: pass an existing branch, "
            "tag or commit with --revision",
            source=source,
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return SourceError(
            f"no model {repo_id!r} on {where} (HTTP {status}): check the name (org/name); a "
            "private model needs `hf auth login` or HF_TOKEN",
            source=source,
        )
    if isinstance(exc, errors.HfHubHTTPError) and not _is_network_error(exc):
        return DownloadError(
            f"the hub at {where} answered HTTP {status} for {repo_id}: run again later, or "
            "set HF_ENDPOINT to a mirror",
            source=source,
            url=where,
        )
    # a timm model's weights: random ones are enough for capacity and latency work
    or_random = ", or pass --weights none for random weights" if is_vision_spec(source) else ""
    return DownloadError(
        f"cannot download {repo_id} from {where} ({_reason(exc)}): check the network, proxy "
        f"or HF_ENDPOINT and run again{or_random}; finished files are kept in "
        f"{settings.cache_dir} and nothing partial is used",
        source=source,
        url=where,
    )


def _from_cache(
    hub: Any, repo_id: str, revision: str | None, settings: HubSettings, *, why: str
) -> HubSnapshot:
    names = _cached_listing(hub, repo_id, revision, settings)
    missing_hint = (
        f"run once with network (unset HF_HUB_OFFLINE) to fill {settings.cache_dir}, or "
        "pass a save_pretrained folder"
    )
    if names is None:
        raise DownloadError(
            f"{repo_id}{'@' + revision if revision else ''} is not in the Hugging Face cache "
            f"({settings.cache_dir}) and {why}: {missing_hint}",
            source=repo_id,
        )
    try:
        files = choose_files(names, repo_id=repo_id)
        with no_progress_bars(hub):
            folder = hub.snapshot_download(
                repo_id,
                revision=revision,
                cache_dir=str(settings.cache_dir),
                allow_patterns=list(files),
                local_files_only=True,
            )
    except (SourceError, hub.errors.LocalEntryNotFoundError) as exc:
        raise DownloadError(
            f"the cached copy of {repo_id} is incomplete ({_reason(exc)}) and {why}: "
            f"{missing_hint}",
            source=repo_id,
        ) from None
    return _checked(repo_id, Path(folder), files, (), None)


def _cached_listing(
    hub: Any, repo_id: str, revision: str | None, settings: HubSettings
) -> list[str] | None:
    """File names of the cached revision: the client's tree listing, else the snapshot's files."""
    get_tree = getattr(hub, "get_cached_repo_tree", None)
    if get_tree is not None:
        try:
            tree = get_tree(repo_id, revision=revision, cache_dir=settings.cache_dir)
            return [f.path for f in tree]
        except Exception as exc:
            logger.debug("no cached tree listing for %s: %s", repo_id, first_line(exc))
    storage = settings.cache_dir / _repo_folder(repo_id)
    ref = storage / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = storage / "snapshots" / commit if commit else None
    if snapshot is None or not snapshot.is_dir():
        return None
    return [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()]


def _checked(
    repo_id: str,
    folder: Path,
    files: tuple[str, ...],
    downloaded: tuple[str, ...],
    endpoint: str | None,
) -> HubSnapshot:
    absent = [f for f in files if not (folder / f).is_file()]
    if absent:
        raise DownloadError(
            f"{repo_id}: {', '.join(absent)} missing from {folder} after the download; "
            "run again with network",
            source=repo_id,
        )
    return HubSnapshot(
        repo_id=repo_id,
        folder=folder,
        commit=folder.name,
        files=files,
        downloaded=downloaded,
        endpoint=endpoint,
    )


def _snapshot_dir(settings: HubSettings, repo_id: str, commit: str) -> Path:
    return settings.cache_dir / _repo_folder(repo_id) / "snapshots" / commit


def _repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def _is_network_error(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is a connection, timeout or protocol failure."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (ConnectionError, TimeoutError)):
            return True
        if type(seen).__module__.split(".")[0] in _NETWORK_MODULES and (
            "Status" not in type(seen).__name__
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _remote_missing(hub: Any) -> type[Exception]:
    """The client's "no such file in the repository" error (renamed in huggingface_hub 1.0)."""
    errors = hub.errors
    found: type[Exception] = getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError)
    return found


def _reason(exc: BaseException) -> str:
    text = first_line(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def no_progress_bars(hub: Any) -> Iterator[None]:
    """``huggingface_hub``'s progress bars off for the block (restored after)."""
    utils = hub.utils
    was_off = bool(utils.are_progress_bars_disabled())
    utils.disable_progress_bars()
    try:
        yield
    finally:
        if not was_off:
            utils.enable_progress_bars()


def _import_hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.errors
        import huggingface_hub.utils  # a lazy attribute until imported (no_progress_bars)
    except ImportError:
        raise MissingDependencyError(
            "huggingface_hub", extra="nlp", feature="Hugging Face hub models"
        ) from None
    return huggingface_hub


__all__ = [
    "CONFIG_FILE",
    "TOKENIZER_FILES",
    "HubSettings",
    "HubSnapshot",
    "choose_files",
    "fetch_hub_file",
    "fetch_hub_model",
    "translate_hub_error",
]
