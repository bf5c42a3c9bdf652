"""Where tritonserver and its pieces are, and the environment it needs.

The ``nvidia-pytriton`` wheel ships ``pytriton/tritonserver/{bin,backends/python,
python_backend_stubs/<X.Y>}`` and its libraries in ``site-packages/nvidia_pytriton.libs``;
an ``/opt/tritonserver`` style install has ``bin``, ``backends`` and ``lib``. For the wheel a
backend folder (the Python backend plus the stub for the running Python) is assembled
once per (wheel, Python) pair in mmelocal's cache folder, atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mmelocal.builder.backends import CLI_FLAGS, LauncherFlags
from mmelocal.errors import MissingDependencyError, UserInputError
from mmelocal.runtime.server_config import ServerConfig

logger = logging.getLogger(__name__)

TRITONSERVER_ENV = "MMELOCAL_TRITONSERVER"
CACHE_ENV = "MMELOCAL_CACHE_DIR"
#: The Python whose environment the wheel's Python-backend stub runs models in (default:
#: the running one). Point it at an environment with numpy<2 (and the model's torch) when
#: the running one has numpy 2 (see ``check_stub_numpy``).
STUB_PYTHON_ENV = "MMELOCAL_STUB_PYTHON"


@dataclass(frozen=True, kw_only=True)
class TritonInstall:
    """Where a tritonserver binary and its pieces are.

    ``backends_dir`` is a ready backend folder (an ``/opt/tritonserver`` install) or
    ``None`` when one must be assembled from ``python_backend_src`` + ``stub`` (the wheel).
    """

    binary: Path
    backends_dir: Path | None = None
    python_backend_src: Path | None = None
    stub: Path | None = None
    libs_dir: Path | None = None

    @property
    def from_wheel(self) -> bool:
        """True when this is the nvidia-pytriton wheel's binary."""
        return self.python_backend_src is not None


def find_tritonserver(
    path: Path | str | None = None, *, flags: LauncherFlags = CLI_FLAGS
) -> TritonInstall:
    """Locate tritonserver: ``path``, ``$MMELOCAL_TRITONSERVER``, the wheel, then PATH/opt.
    A refusal's hint names ``flags`` (those of where the user is)."""
    given = path or os.environ.get(TRITONSERVER_ENV)
    if given:
        binary = Path(given).expanduser().absolute()
        if binary.is_dir():
            binary = binary / "bin" / "tritonserver"
        if not binary.is_file():
            raise UserInputError(f"tritonserver not found at {binary}: give the binary's path")
        if not os.access(binary, os.X_OK):
            raise UserInputError(
                f"{binary} is not executable: give the tritonserver binary's path "
                "(or its install folder)"
            )
        return _install_from_binary(binary, flags=flags)
    wheel = _wheel_install()
    if wheel is not None:
        check_stub_numpy(flags=flags)  # the wheel's stub only: another Triton has its own
        return wheel
    for candidate in (shutil.which("tritonserver"), "/opt/tritonserver/bin/tritonserver"):
        if candidate and Path(candidate).is_file():
            return _install_from_binary(Path(candidate), flags=flags)
    raise MissingDependencyError(
        "nvidia-pytriton", extra="triton", feature="The local Triton launcher"
    )


def _wheel_install() -> TritonInstall | None:
    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    server = root / "tritonserver"
    binary = server / "bin" / "tritonserver"
    if not binary.is_file():
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise UserInputError(
            f"nvidia-pytriton has no Python backend stub for Python {version} ({stub}); "
            "use a Python version the wheel supports"
        )
    return TritonInstall(
        binary=binary,
        python_backend_src=server / "backends" / "python",
        stub=stub,
        libs_dir=root.parent / "nvidia_pytriton.libs",
    )


#: The wheel's Python-backend stub (nvidia-pytriton 0.7.0, Triton 2.51) is built against
#: numpy 1.x (the wheel requires ``numpy<2``). Under numpy 2 it reads array descriptors
#: with the old layout: every output tensor comes back with 0 bytes (Triton answers
#: "output tensor shape does not match size of output") and ``Tensor.from_dlpack`` returns
#: wrong values. Seen on a GPU machine whose Python had numpy 2.5.2 and reproduced here with
#: numpy 2.0.2 to 2.4.6, on CPU.
STUB_NUMPY_MAJOR = 1


def check_stub_numpy(version: str | None = None, *, flags: LauncherFlags = CLI_FLAGS) -> None:
    """Refuse to start the wheel's stub under a numpy it cannot read (see above).

    ``version`` defaults to the numpy of :func:`stub_python`'s environment: the stub loads
    the site-packages of the first ``python3`` on its PATH, which is that one's. The
    message names ``flags``' way to the Docker launcher.
    """
    python = stub_python()
    if version is None:
        version = _numpy_version(python)
        if version is None:
            return
    major = int(version.split(".", 1)[0])
    if major > STUB_NUMPY_MAJOR:
        raise UserInputError(
            f"numpy {version} is installed for {python}, but the Python-backend stub of "
            "nvidia-pytriton (Triton 2.51) is built for numpy 1.x: every model output would "
            "come back empty ('output tensor shape does not match size of output'). "
            f"Install numpy<2 there ({python} -m pip install 'numpy<2'), point "
            f"${STUB_PYTHON_ENV} at a Python whose environment has numpy<2, or run "
            f"Triton's Docker image ({flags.docker})"
        )


def stub_python() -> Path:
    """The Python whose environment the stub uses (``$MMELOCAL_STUB_PYTHON`` or this one)."""
    given = os.environ.get(STUB_PYTHON_ENV)
    if not given:
        return Path(sys.executable)
    python = Path(given).expanduser()
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise UserInputError(f"${STUB_PYTHON_ENV}={given} is not an executable Python")
    return python


def _numpy_version(python: Path) -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    if python == Path(sys.executable):
        try:
            return dist_version("numpy")
        except PackageNotFoundError:
            return None
    code = "import importlib.metadata as m; print(m.version('numpy'))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _install_from_binary(binary: Path, *, flags: LauncherFlags = CLI_FLAGS) -> TritonInstall:
    wheel = _wheel_install()
    if wheel is not None and wheel.binary.resolve() == binary.resolve():
        check_stub_numpy(flags=flags)
        return wheel
    root = binary.parent.parent
    backends, libs = root / "backends", root / "lib"
    return TritonInstall(
        binary=binary,
        backends_dir=backends if backends.is_dir() else None,
        libs_dir=libs if libs.is_dir() else None,
    )


def cache_dir() -> Path:
    """mmelocal's cache folder (``$MMELOCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/mmelocal``)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mmelocal"


def prepare_backend_directory(install: TritonInstall, *, cache: Path | None = None) -> Path | None:
    """A backend folder: ``python/`` plus the stub for this Python (built once, atomically)."""
    if not install.from_wheel:
        return install.backends_dir
    assert install.python_backend_src is not None and install.stub is not None
    stat = install.stub.stat()
    key = hashlib.sha256(
        f"{install.python_backend_src.resolve()}|{install.stub.resolve()}|{stat.st_size}|"
        f"{stat.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    root = (cache or cache_dir()) / "triton-backends"
    target = root / f"py{sys.version_info.major}{sys.version_info.minor}-{key}"
    if (target / "python" / "triton_python_backend_stub").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        shutil.copytree(install.python_backend_src, staging / "python")
        shutil.copy2(install.stub, staging / "python" / "triton_python_backend_stub")
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "python" / "triton_python_backend_stub").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("assembled Triton backend folder %s", target)
    return target


def server_environment(install: TritonInstall, config: ServerConfig) -> dict[str, str]:
    """The child environment: ours + library path + this Python's site-packages + config env."""
    env = dict(os.environ)
    lib_dirs: list[str] = []
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlibrary = sysconfig.get_config_var("INSTSONAME")
    if libdir and ldlibrary and (Path(libdir) / ldlibrary).exists():
        lib_dirs.append(libdir)
    if install.libs_dir is not None and install.libs_dir.is_dir():
        lib_dirs.append(str(install.libs_dir))
    env["LD_LIBRARY_PATH"] = _join_paths(lib_dirs, env.get("LD_LIBRARY_PATH"))
    env["PYTHONPATH"] = _join_paths(_site_packages(), env.get("PYTHONPATH"))
    # The stub's embedded interpreter starts isolated (PYTHONPATH is not read) and finds its
    # prefix from the first ``python3`` on PATH: this environment's bin makes it load the
    # same site-packages (a venv's pyvenv.cfg included).
    env["PATH"] = _join_paths([str(stub_python().parent)], env.get("PATH"))
    env.update(config.to_env())
    return env


def _site_packages() -> list[str]:
    import site

    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    with contextlib.suppress(AttributeError):
        paths += site.getsitepackages()
    paths += [p for p in sys.path if p.endswith("site-packages")]
    seen: list[str] = []
    for p in paths:
        if p not in seen and Path(p).is_dir():
            seen.append(p)
    return seen


def _join_paths(first: list[str], existing: str | None) -> str:
    items = list(first) + [p for p in (existing or "").split(os.pathsep) if p and p not in first]
    return os.pathsep.join(items)


__all__ = [
    "CACHE_ENV",
    "STUB_PYTHON_ENV",
    "TRITONSERVER_ENV",
    "TritonInstall",
    "cache_dir",
    "check_stub_numpy",
    "find_tritonserver",
    "prepare_backend_directory",
    "server_environment",
    "stub_python",
]
