"""The GPUs a server started from here runs on: ``CUDA_VISIBLE_DEVICES`` read as CUDA reads
it, or GPUs chosen by nvidia-smi's number.

NVML (:class:`~mmelocal.runtime.memory.Nvml`) sees every GPU of the machine whatever
``CUDA_VISIBLE_DEVICES`` says; a CUDA process such as tritonserver sees only those it names.
How CUDA reads the variable (CUDA Programming Guide, "CUDA Environment Variables",
``CUDA_VISIBLE_DEVICES``):

* unset: every GPU; set to an empty string: none;
* a comma-separated sequence of GPU identifiers, enumerated in that order: integer
  indices, or UUIDs as ``nvidia-smi -L`` prints them (``GPU-8932f937-...``), or any prefix
  of one that names a single GPU; ``MIG-...`` names one MIG instance (a slice of a card);
* at the first identifier that names no GPU (``-1``, an index past the last GPU, a UUID
  prefix that matches none) CUDA stops: only the GPUs before it are visible.

Seen on an H200 (``torch.cuda.device_count()``): ``0`` and a ``GPU-`` prefix of its UUID
give 1 GPU; ``-1``, ``1``, an empty value and ``0,0`` give none (a GPU named twice hides
them all, which the guide does not say: it is refused here, with that reason).

Integer indices follow ``CUDA_DEVICE_ORDER``: ``FASTEST_FIRST`` by default, nvidia-smi's
(PCI bus) order with ``PCI_BUS_ID``. NVML numbers by PCI bus, so on a machine whose GPUs
differ an index means a known card only under ``PCI_BUS_ID``; where they are all alike,
any index names the same card. What cannot be read exactly is refused with what to set.

Every launcher honours the same selection: the local one passes the environment (this
process's, under the server config's ``env``) to tritonserver, where CUDA reads it; a
container does not inherit this environment, so :func:`container_gpus` turns the
selection into the cards' UUIDs, given to Docker as the device request's ``device_ids``
(the NVIDIA Container Toolkit takes "a comma-separated list of GPU UUID(s) or index(es)",
its page "Specialized Configurations with Docker"; its indices are NVML's) and to the
container's CUDA as ``CUDA_VISIBLE_DEVICES``, in the same order.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmelocal.errors import UserInputError

logger = logging.getLogger(__name__)

VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"
_INDEX = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, kw_only=True)
class ServerGpus:
    """The GPUs a server will see, in CUDA's order: ``names`` (NVML's product names),
    ``indices`` (NVML's numbers, nvidia-smi's: the devices to read memory from), ``uuids``
    and ``total_bytes`` (NVML's memory total of each, what tells cards of one name apart:
    :func:`~mmelocal.bench.capacity.projection.card_named`); the environment that makes a
    server see exactly them, and how they were chosen. :meth:`pin` is the environment of a
    server that sees one of them alone."""

    names: tuple[str, ...] = ()
    indices: tuple[int, ...] = ()
    uuids: tuple[str, ...] = ()
    total_bytes: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    origin: str = "every GPU NVML sees"

    def pin(self, position: int) -> dict[str, str]:
        """The environment of a server on the ``position``-th of these GPUs alone: its UUID
        in ``CUDA_VISIBLE_DEVICES``, which names that card whatever ``CUDA_DEVICE_ORDER``."""
        return {VISIBLE: self.uuids[position]}

    def describe(self) -> str:
        """``2 x Tesla T4 (CUDA_VISIBLE_DEVICES=2,3)``, or ``no GPU (...)``."""
        if not self.names:
            return f"no GPU ({self.origin})"
        counts: dict[str, int] = {}
        for name in self.names:
            counts[name] = counts.get(name, 0) + 1
        cards = ", ".join(f"{n} x {name}" for name, n in counts.items())
        return f"{cards} ({self.origin})"


def server_gpus(
    *, chosen: Sequence[int] | None = None, environ: Mapping[str, str] | None = None
) -> ServerGpus:
    """The GPUs a server started now would use: ``chosen`` (NVML's numbers, nvidia-smi's)
    when given, whatever ``CUDA_VISIBLE_DEVICES`` says; else those ``CUDA_VISIBLE_DEVICES``
    names in ``environ`` (default: this process's environment, which the server inherits);
    else every GPU. No NVML (no package, driver or GPU): no GPU, and ``chosen`` is refused.
    """
    import os

    from mmelocal.runtime.memory import Nvml

    env = os.environ if environ is None else environ
    try:
        nvml = Nvml()
    except Exception:
        if chosen:
            raise UserInputError(
                f"GPUs {_numbers(chosen)} were chosen, but NVML finds no NVIDIA GPU here "
                "(nvidia-ml-py, a driver and a GPU are needed)"
            ) from None
        return ServerGpus(origin="NVML finds none")
    try:
        count = nvml.device_count()
        if chosen:
            return _chosen(nvml, count, chosen)
        if VISIBLE in env:
            return _from_environment(nvml, count, env[VISIBLE], env.get(ORDER))
        return _described(nvml, range(count))
    finally:
        nvml.close()


def container_gpus(
    env: Mapping[str, str] | None = None, *, environ: Mapping[str, str] | None = None
) -> ServerGpus | None:
    """The GPUs to give a container so that its server sees what the local launcher's would
    with the server environment ``env``: ``CUDA_VISIBLE_DEVICES`` (and ``CUDA_DEVICE_ORDER``)
    from ``env``, else from ``environ`` (default: this process's environment, which a local
    server inherits), read as :func:`server_gpus` reads it. None when neither sets
    ``CUDA_VISIBLE_DEVICES``: every GPU, as a local server would see. Else the chosen GPUs,
    their ``uuids`` the device ids to request (none: no GPU) and their ``env`` the UUIDs in
    ``CUDA_VISIBLE_DEVICES`` (the container numbers its GPUs from 0, so an index chosen
    here would name another card there, or none). A non-empty selection that NVML cannot
    read here (no nvidia-ml-py, driver or GPU) is refused with what to do.
    """
    import os

    from mmelocal.runtime.memory import Nvml

    base = os.environ if environ is None else environ
    given = env or {}
    read = {k: given.get(k, base.get(k)) for k in (VISIBLE, ORDER)}
    selection = {k: v for k, v in read.items() if v is not None}
    value = selection.get(VISIBLE)
    if value is None:
        return None
    if not value:
        return ServerGpus(env={VISIBLE: ""}, origin=f"{VISIBLE}= (empty)")
    if hides_every_gpu(value):  # no GPU on any machine: nothing for NVML to read
        return ServerGpus(env={VISIBLE: ""}, origin=f"{VISIBLE}={value}: names no GPU")
    try:
        nvml = Nvml()
    except Exception:
        raise UserInputError(
            f"{VISIBLE}={value} chooses the GPUs, but NVML cannot read this machine's GPUs "
            "to give a container the same cards (nvidia-ml-py, a driver and a GPU are "
            "needed: pip install 'mmelocal[gpu]'); or name the container's GPUs yourself "
            "(the Docker launcher's gpus=)"
        ) from None
    try:
        chosen = _from_environment(nvml, nvml.device_count(), value, selection.get(ORDER))
    finally:
        nvml.close()
    return dataclasses.replace(chosen, env={VISIBLE: ",".join(chosen.uuids)})


def hides_every_gpu(value: str | None) -> bool:
    """True when ``CUDA_VISIBLE_DEVICES=value`` leaves CUDA no GPU on any machine: an empty
    value, or a first identifier that is a negative index (``-1``, a common idiom), at which
    CUDA stops before naming a GPU (module docstring). None (unset) shows every GPU. Other
    values depend on the machine's GPUs (:func:`server_gpus` reads them through NVML)."""
    if value is None:
        return False
    first = value.split(",")[0]
    return not value or (_INDEX.fullmatch(first) is not None and int(first) < 0)


def _numbers(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices)


def _described(nvml: Any, indices: Sequence[int], **rest: Any) -> ServerGpus:
    """The GPUs NVML numbers ``indices``, in that order, with their names and UUIDs."""
    return ServerGpus(
        names=tuple(nvml.name(i) for i in indices),
        indices=tuple(indices),
        uuids=tuple(nvml.uuid(i) for i in indices),
        total_bytes=tuple(nvml.memory(i)[1] for i in indices),
        **rest,
    )


def _chosen(nvml: Any, count: int, chosen: Sequence[int]) -> ServerGpus:
    bad = [i for i in chosen if not 0 <= i < count]
    if bad or len(set(chosen)) != len(chosen):
        raise UserInputError(
            f"GPUs {_numbers(chosen)} were chosen; this machine's are 0..{count - 1} "
            "(nvidia-smi's numbers), each chosen once"
        )
    # by UUID: the very cards NVML numbered, whatever order CUDA numbers them in
    uuids = ",".join(nvml.uuid(i) for i in chosen)
    return _described(
        nvml, chosen, env={VISIBLE: uuids}, origin=f"GPU {_numbers(chosen)} by nvidia-smi's number"
    )


def _from_environment(nvml: Any, count: int, value: str, order: str | None) -> ServerGpus:
    indices: list[int] = []
    seen: set[int] = set()
    stopped_at: str | None = None
    for token in value.split(",") if value else []:
        index = _resolve(token, nvml, count, order)
        if index is None:
            stopped_at = token
            break
        if index in seen:
            raise UserInputError(
                f"{VISIBLE}={value} names GPU {token} twice, and then CUDA sees no GPU at "
                "all; name each GPU once"
            )
        seen.add(index)
        indices.append(index)
    origin = f"{VISIBLE}={value}"
    if stopped_at is not None:
        origin += f"; CUDA stops at {stopped_at!r}, which names no GPU here"
        logger.warning(
            "%s=%s: %r names no GPU here (GPUs 0..%d); CUDA sees only the GPUs before it",
            VISIBLE,
            value,
            stopped_at,
            count - 1,
        )
    env = {VISIBLE: value} | ({ORDER: order} if order is not None else {})
    return _described(nvml, indices, env=env, origin=origin)


def _resolve(token: str, nvml: Any, count: int, order: str | None) -> int | None:
    """NVML's number of the GPU ``token`` names (None: it names none, and CUDA stops)."""
    if token.startswith("MIG-"):
        raise UserInputError(
            f"{VISIBLE} names a MIG instance ({token}): a slice of a card, whose rate is "
            "not the card's; name whole GPUs (their numbers or GPU- UUIDs, nvidia-smi -L)"
        )
    if token.startswith("GPU-"):
        matches = [i for i in range(count) if nvml.uuid(i).startswith(token)]
        return matches[0] if len(matches) == 1 else None
    if _INDEX.fullmatch(token) is None or not 0 <= int(token) < count:
        return None
    names = {nvml.name(i) for i in range(count)}
    if order != "PCI_BUS_ID" and len(names) > 1:
        raise UserInputError(
            f"{VISIBLE} names GPU {token} by CUDA's number, which follows {ORDER} (fastest "
            f"first unless it is PCI_BUS_ID), and this machine's GPUs differ "
            f"({', '.join(sorted(names))}): set {ORDER}=PCI_BUS_ID to number them as "
            "nvidia-smi does, or name them by UUID (nvidia-smi -L)"
        )
    return int(token)


__all__ = ["ServerGpus", "container_gpus", "hides_every_gpu", "server_gpus"]
