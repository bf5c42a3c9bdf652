"""One size parser and one percentile definition for every command and report."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmelocal.errors import UserInputError
from mmelocal.stats import nearest_rank, percentile, percentiles
from mmelocal.units import parse_size_bytes


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4GiB", 4 * 1024**3),
        ("4 gib", 4 * 1024**3),
        ("512MB", 512 * 10**6),
        ("6MB", 6_000_000),
        ("1.5GiB", 3 * 2**29),
        ("1000", 1000),
        ("10B", 10),
        (2048, 2048),
    ],
)
def test_sizes(text: str | int, value: int) -> None:
    assert parse_size_bytes(text) == value


@pytest.mark.parametrize("text", ["4G", "512m", "1k", "2T"])
def test_a_bare_prefix_is_refused_with_both_spellings_offered(text: str) -> None:
    number = text[:-1]
    unit = text[-1].upper()
    with pytest.raises(UserInputError, match="ambiguous") as info:
        parse_size_bytes(text, what="--memory-budget")
    assert f"{number}{unit}iB" in str(info.value)
    assert f"{number}{unit}B" in str(info.value)
    assert "--memory-budget" in str(info.value)


@pytest.mark.parametrize("text", ["", "GiB", "-1GiB", "4 parsecs", "0", "0.0001B", 0, -5])
def test_sizes_refused(text: str | int) -> None:
    with pytest.raises(UserInputError, match="size"):
        parse_size_bytes(text)


def test_the_serve_and_capacity_options_share_the_parser() -> None:
    """``serve --memory-budget 4GiB`` and ``capacity --memory-budget 4GiB`` are one number."""
    import click

    from mmelocal.cli.capacity import measure
    from mmelocal.cli.serve import serve

    def budget_callback(command: click.Command) -> object:
        (option,) = [p for p in command.params if "--memory-budget" in p.opts]
        return option.callback

    assert budget_callback(serve) is budget_callback(measure) is not None


def test_nearest_rank_is_an_observed_value() -> None:
    values = list(range(1, 101))
    assert nearest_rank(values, 0.5) == 50
    assert nearest_rank(values, 0.99) == 99
    assert nearest_rank(values, 1.0) == 100
    assert nearest_rank(values, 0.0) == 1
    assert math.isnan(nearest_rank([], 0.5))
    assert percentiles([3.0, 1.0, 2.0, 10.0], (50, 99)) == [2.0, 10.0]
    assert percentile([0.25, 7.5], 50) == 0.25
    # numpy interpolates between samples; the one definition here does not
    assert float(np.percentile([1.0, 2.0], 50)) == 1.5
    with pytest.raises(ValueError, match="fraction"):
        nearest_rank([1.0], 1.5)


@pytest.mark.parametrize(
    ("p", "n", "rank"),
    [
        (7, 100, 7),  # 0.07 * 100 is 7.000000000000001 in floats
        (55, 100, 55),
        (28, 25, 7),
        (67, 1500, 1005),
        (99.9, 1000, 999),  # CloudWatch's p99.9 (the local AWS reads "p99.9" / 100)
    ],
)
def test_float_rounding_never_pushes_the_rank_up(p: float, n: int, rank: int) -> None:
    """The p-th percentile of 1..n is ceil(p n / 100) exactly, whatever the float product."""
    values = list(range(1, n + 1))
    assert percentile(values, p) == rank
    assert nearest_rank(values, float(f"{p}") / 100.0) == rank
