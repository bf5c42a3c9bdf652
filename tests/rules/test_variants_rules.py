"""The weighted draw of production variants (pure: no server)."""

from __future__ import annotations

import pytest

from mmelocal.rules.variants import choose_variant, traffic_shares


def test_traffic_shares_and_the_draw() -> None:
    assert traffic_shares([3, 1]) == [0.75, 0.25]
    assert traffic_shares([0, 0]) == [0.5, 0.5]
    assert [choose_variant([3, 1], u) for u in (0.0, 0.74999, 0.75, 0.99999)] == [0, 0, 1, 1]
    assert {choose_variant([0, 2, 0], u) for u in (0.0, 0.5, 0.999999)} == {1}
    assert choose_variant([1, 0], 0.999999999) == 0  # a 0-weight variant is never drawn
    with pytest.raises(Exception, match=">= 0"):
        traffic_shares([1, -1])
    with pytest.raises(Exception, match=r"\[0, 1\)"):
        choose_variant([1], 1.0)


def test_target_variant_error_names_the_variant_the_endpoint_lacks() -> None:
    """The one check of TargetVariant (the local AWS and ``mmelocal serve``)."""
    from mmelocal.rules.variants import target_variant_error

    assert target_variant_error("A", "ep", ["A", "B"]) is None
    message = target_variant_error("C", "ep", ["A", "B"])
    assert message is not None and '"C"' in message and '"ep"' in message and "A, B" in message
