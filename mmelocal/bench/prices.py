"""Hourly instance prices for the sweep's cost column: a data file, never a built-in fact.

The packaged ``mmelocal/bench/data/prices.yaml`` holds example values; a user's file
(``--prices FILE``, same format) replaces it entirely. Every cost the sweep prints names the
file it came from, so nobody mistakes an example for a quote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from mmelocal.bench.datafile import parse_yaml
from mmelocal.errors import UserInputError


@dataclass(frozen=True, kw_only=True)
class PriceTable:
    """Hourly prices per instance type, with where they came from."""

    currency: str
    source: str
    origin: str
    prices: Mapping[str, float] = field(default_factory=dict)
    #: per instance type, where its price comes from and when it was read ("URL, date")
    sources: Mapping[str, str] = field(default_factory=dict)
    #: instance types the table lists without a checked price
    unpriced: tuple[str, ...] = ()

    def source_for(self, instance_type: str) -> str:
        """Where ``instance_type``'s price comes from (the table's source when not given)."""
        return self.sources.get(instance_type, self.source)

    def price_for(self, instance_type: str) -> float | None:
        """The hourly price of ``instance_type`` (None when the table has none)."""
        return self.prices.get(instance_type)

    def note(self, instance_type: str) -> str:
        """One sentence that says what the price is and is not."""
        price = self.price_for(instance_type)
        if price is None:
            return (
                f"No hourly price for {instance_type} in {self.origin}: costs are not shown "
                "(add it to a prices file and pass --prices FILE)."
            )
        return (
            f"Hourly price of {instance_type}: {price:g} {self.currency}, an input from "
            f"{self.origin} ({self.source_for(instance_type)}), not a fact mmelocal checks; "
            "pass --prices FILE "
            "with your own."
        )


def parse_prices(text: str, *, origin: str) -> PriceTable:
    """Parse a prices YAML document (``currency``, ``source``, ``prices: {type: hourly}``).

    A price may also be a mapping ``{hourly: X, source: WHERE, date: YYYY-MM-DD}`` (its own
    source and the date it was read); ``hourly: null`` lists a type with no checked price.
    """
    data = parse_yaml(text, origin=origin)
    if not isinstance(data, dict) or not isinstance(data.get("prices"), dict):
        raise UserInputError(f"{origin}: expected a mapping with a 'prices:' mapping")
    prices: dict[str, float] = {}
    sources: dict[str, str] = {}
    unpriced: list[str] = []
    for name, value in data["prices"].items():
        if isinstance(value, dict):
            where = value.get("source")
            if where:
                sources[str(name)] = f"{where}, {value.get('date', 'undated')}"
            value = value.get("hourly")
            if value is None:
                unpriced.append(str(name))
                continue
        try:
            price = float(value)
        except (TypeError, ValueError):
            raise UserInputError(
                f"{origin}: price of {name} must be a number, got {value!r}"
            ) from None
        if price < 0:
            raise UserInputError(f"{origin}: price of {name} must be >= 0, got {price}")
        prices[str(name)] = price
    return PriceTable(
        currency=str(data.get("currency", "USD")),
        source=str(data.get("source", "user-supplied")),
        origin=origin,
        prices=prices,
        sources=sources,
        unpriced=tuple(unpriced),
    )


def load_prices(path: Path | str | None = None) -> PriceTable:
    """The user's price file, or the packaged example table."""
    if path is None:
        text = resources.files("mmelocal.bench").joinpath("data/prices.yaml").read_text("utf-8")
        return parse_prices(text, origin="the packaged prices.yaml")
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot read prices file {path}: {exc.strerror}") from exc
    return parse_prices(text, origin=str(path))


__all__ = ["PriceTable", "load_prices", "parse_prices"]
