"""The launcher kinds and the one factory that maps a kind to its launcher class.

``check``, the emulator and the pytest fixtures all take a kind (``"local"``, ``"docker"``,
``"external"``) and get their launcher from :func:`make_launcher`; adding a launcher means
one entry in :data:`LAUNCHERS` and one branch here (see the design page of the docs).
The launcher modules are imported only for the kind asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import CLI_FLAGS, LauncherFlags
from mmelocal.errors import UserInputError
from mmelocal.runtime.launcher import TritonLauncher
from mmelocal.runtime.server_config import ServerConfig

#: the launcher kinds: ``local`` (the pip tritonserver), ``docker`` (a Triton image),
#: ``external`` (a server already running; needs its URL)
LAUNCHERS = ("local", "docker", "external")
#: the kinds that start (and own) their server; the pytest fixtures take only these
OWNED_LAUNCHERS = ("local", "docker")


#: which launcher reads each launcher-specific argument of :func:`make_launcher` (the others
#: ignore it): the rule ``mmelocal check``, the pytest plugin and ``TestTritonServer`` refuse
#: a mismatch by
READER_OF = {"tritonserver": "local", "image": "docker", "url": "external"}


def misplaced_option(
    kind: str, given: Mapping[str, tuple[str, object]], *, launcher_flag: str = "launcher"
) -> str | None:
    """The message for the first option in ``given`` that launcher ``kind`` would ignore
    (``given``: the option as the user wrote it -> (its :data:`READER_OF` key, its value;
    None or empty when absent)); None when every given option is read. ``launcher_flag`` is
    how the user chooses the launcher (``--launcher``, ``--mmelocal-launcher``)."""
    for flag, (key, value) in given.items():
        reader = READER_OF[key]
        if value not in (None, "", ()) and kind != reader:
            return (
                f"{flag} is only read by {launcher_flag} {reader} (the launcher is {kind}): "
                f"add {launcher_flag} {reader} or drop {flag}"
            )
    return None


def check_launcher_kind(kind: str, allowed: tuple[str, ...] = LAUNCHERS) -> None:
    """Raise :class:`UserInputError` unless ``kind`` is one of ``allowed``."""
    if kind not in allowed:
        raise UserInputError(f"launcher must be one of {', '.join(allowed)}, got {kind!r}")


def make_launcher(
    kind: str,
    config: ServerConfig,
    *,
    tritonserver: Path | str | None = None,
    image: str | None = None,
    url: str | None = None,
    sagemaker_url: str | None = None,
    start_timeout_s: float | None = None,
    log_path: Path | str | None = None,
    flags: LauncherFlags = CLI_FLAGS,
) -> TritonLauncher:
    """The launcher of ``kind`` for ``config``: the one place that maps a kind to its class.

    ``tritonserver`` is the binary for ``local``, ``image`` the image for ``docker``,
    ``url`` (and ``sagemaker_url``) the running server for ``external``. Each launcher's
    own default applies where ``start_timeout_s`` is None. The local launcher's refusals
    name ``flags`` (those of where the user is) as the way to the Docker launcher.
    """
    check_launcher_kind(kind)
    timeout: dict[str, Any] = {}
    if start_timeout_s is not None:
        timeout["start_timeout_s"] = start_timeout_s
    if kind == "local":
        from mmelocal.runtime.local import LocalLauncher

        return LocalLauncher(
            config, tritonserver=tritonserver, log_path=log_path, flags=flags, **timeout
        )
    if kind == "docker":
        from mmelocal.runtime.docker import DockerLauncher

        return DockerLauncher(config, image=image, log_path=log_path, **timeout)
    from mmelocal.runtime.external import ExternalLauncher

    if not url and not sagemaker_url:
        raise UserInputError("launcher 'external' needs the URL of the running server")
    return ExternalLauncher(str(url or sagemaker_url), sagemaker_url=sagemaker_url, **timeout)


__all__ = [
    "LAUNCHERS",
    "OWNED_LAUNCHERS",
    "READER_OF",
    "check_launcher_kind",
    "make_launcher",
    "misplaced_option",
]
