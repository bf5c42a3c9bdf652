"""Synthetic traces: Poisson arrivals at a rate that follows a shape, over models whose
popularity follows a law you choose.

Popularity (over ranks 0..N-1; rank r is ``model-{r}.tar.gz`` until a shift):

* ``zipf``: rank r gets weight ``1 / (r + 1) ** s``;
* ``uniform``: every model the same;
* ``hot-set K:F``: fraction F of requests go to the first K models (uniformly among them),
  the rest uniformly to the others.

``shift_at_s`` moves the ranking at that time: rank r becomes model ``(r + offset) % N``
with ``offset = max(K, N // 2)`` for a hot set (the new hot set shares no model with the
old one when ``K <= N / 2``) and ``N // 2`` otherwise.

Rate shapes (``rate_rps`` is the mean; for ``diurnal`` over whole periods only: a trace
shorter than ``P`` stays near the trough, one hour of a one-day period averages 0.5 R):

* ``constant``: ``R``;
* ``steps``: four equal quarters of the duration at ``0.5 R, R, 1.5 R, R``;
* ``diurnal``: ``R * (1 - 0.5 cos(2 pi t / P))`` with period ``P`` (default 86,400 s, one
  day): the trough ``0.5 R`` at the start, the peak ``1.5 R`` at ``P / 2``.

Arrivals are an inhomogeneous Poisson process: the count is Poisson with mean the integral
of the rate; times are drawn through the inverse of the cumulative rate.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.traffic.trace import Trace

SHAPES = ("constant", "steps", "diurnal")
DIURNAL_PERIOD_S = 86_400.0
#: the most requests one synthetic trace holds (a 2e8-row CSV is ~6 GB)
MAX_REQUESTS = 200_000_000


@dataclass(frozen=True, kw_only=True)
class Popularity:
    """How requests spread over the models (see the module docstring)."""

    kind: str = "zipf"
    zipf_s: float = 1.0
    hot_models: int = 0
    hot_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("zipf", "uniform", "hot-set"):
            raise UserInputError(f"popularity must be zipf, uniform or hot-set, got {self.kind!r}")
        if self.kind == "zipf" and self.zipf_s < 0:
            raise UserInputError(f"--zipf must be >= 0, got {self.zipf_s}")
        if self.kind == "hot-set" and (self.hot_models < 1 or not 0 <= self.hot_fraction <= 1):
            raise UserInputError(
                f"--hot-set K:F needs K >= 1 and 0 <= F <= 1, got "
                f"{self.hot_models}:{self.hot_fraction}"
            )

    def weights(self, models: int) -> np.ndarray:
        """The probability of each rank."""
        if self.kind == "uniform":
            return np.full(models, 1.0 / models)
        if self.kind == "zipf":
            w = 1.0 / np.arange(1, models + 1, dtype=np.float64) ** self.zipf_s
            return w / w.sum()
        if self.hot_models > models:
            raise UserInputError(
                f"--hot-set {self.hot_models}:{self.hot_fraction:g} names more hot models than "
                f"--models {models}"
            )
        w = np.empty(models)
        cold = models - self.hot_models
        w[: self.hot_models] = self.hot_fraction / self.hot_models
        if cold:
            w[self.hot_models :] = (1.0 - self.hot_fraction) / cold
        else:
            w[:] = 1.0 / models
        return w / w.sum()

    def shift_offset(self, models: int) -> int:
        """How far the ranking moves at the shift."""
        if self.kind == "hot-set":
            return max(self.hot_models, models // 2) % models
        return models // 2

    def describe(self) -> str:
        """``zipf 1.2``, ``uniform``, ``hot-set 10:0.9``."""
        if self.kind == "zipf":
            return f"zipf {self.zipf_s:g}"
        if self.kind == "hot-set":
            return f"hot-set {self.hot_models}:{self.hot_fraction:g}"
        return "uniform"


def parse_hot_set(text: str) -> Popularity:
    """``K:F`` -> a hot-set popularity."""
    k, sep, f = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return Popularity(kind="hot-set", hot_models=int(k), hot_fraction=float(f))
    except ValueError:
        raise UserInputError(
            f"--hot-set must be K:FRACTION (e.g. 10:0.9 sends 90 % of requests to 10 models), "
            f"got {text!r}"
        ) from None


def rate_at(
    shape: str, rate_rps: float, t: np.ndarray, duration_s: float, period_s: float
) -> np.ndarray:
    """The shape's rate (requests/s) at times ``t``."""
    if shape == "constant":
        return np.full_like(t, rate_rps)
    if shape == "steps":
        quarter = np.minimum((t / duration_s * 4).astype(np.int64), 3)
        return rate_rps * np.array([0.5, 1.0, 1.5, 1.0])[quarter]
    if shape == "diurnal":
        return rate_rps * (1.0 - 0.5 * np.cos(2 * np.pi * t / period_s))
    raise UserInputError(f"--shape must be one of {', '.join(SHAPES)}, got {shape!r}")


def make_trace(
    *,
    models: int,
    rate_rps: float,
    duration_s: float,
    popularity: Popularity | None = None,
    shift_at_s: float | None = None,
    shape: str = "constant",
    period_s: float = DIURNAL_PERIOD_S,
    seed: int = 0,
    name_format: str = "model-{}.tar.gz",
) -> Trace:
    """A synthetic trace (see the module docstring)."""
    popularity = popularity or Popularity()
    if models < 1:
        raise UserInputError(f"--models must be >= 1, got {models}")
    if rate_rps <= 0 or duration_s <= 0:
        raise UserInputError(
            f"--rate and --duration must be > 0, got {rate_rps:g} and {duration_s:g}"
        )
    if shape not in SHAPES:
        raise UserInputError(f"--shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    if period_s <= 0:
        raise UserInputError(f"the diurnal period must be > 0 s, got {period_s:g}")
    if shift_at_s is not None and not 0 < shift_at_s < duration_s:
        raise UserInputError(
            f"--shift-at must fall inside the trace (0 < T < {duration_s:g} s), got {shift_at_s:g}"
        )
    expected = rate_rps * duration_s
    if expected > MAX_REQUESTS:
        raise UserInputError(
            f"--rate {rate_rps:g} for {duration_s:g} s is {expected:,.0f} requests, over the "
            f"{MAX_REQUESTS:,} a trace file can reasonably hold: shorten --duration"
        )
    weights = popularity.weights(models)  # checks the hot set against the model count
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, duration_s, 4097)
    rates = rate_at(shape, rate_rps, grid, duration_s, period_s)
    cumulative = np.concatenate(([0.0], np.cumsum((rates[1:] + rates[:-1]) / 2 * np.diff(grid))))
    count = int(rng.poisson(cumulative[-1]))
    times = np.sort(np.interp(rng.uniform(0.0, cumulative[-1], count), cumulative, grid))
    ranks = rng.choice(models, size=count, p=weights)
    if shift_at_s is not None:
        after = times >= shift_at_s
        ranks[after] = (ranks[after] + popularity.shift_offset(models)) % models
    names = tuple(name_format.format(i) for i in range(models))
    return Trace(times_s=times, model_ids=ranks.astype(np.int32), models=names)


def fill_store(store: Path | str, tarball: Path | str, targets: Iterable[str]) -> int:
    """Put ``tarball`` in the folder ``store`` under every target name (hard links where the
    file system allows, copies otherwise): a store for replaying a synthetic trace with
    identical copies of one model. Returns how many files it added."""
    store, tarball = Path(store), Path(tarball)
    if not tarball.is_file():
        raise UserInputError(f"--tarball {tarball} is not a file: give a model.tar.gz")
    store.mkdir(parents=True, exist_ok=True)
    added = 0
    for target in targets:
        dest = store / target
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tarball, dest)
        except OSError:
            shutil.copyfile(tarball, dest)
        added += 1
    return added


__all__ = [
    "DIURNAL_PERIOD_S",
    "SHAPES",
    "Popularity",
    "fill_store",
    "make_trace",
    "parse_hot_set",
    "rate_at",
]
