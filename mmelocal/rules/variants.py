"""Which production variant serves a call: the service's weighted routing, as pure code.

A call without ``TargetVariant`` goes to a variant drawn with probability weight / sum of
weights ("Testing models with production variants", SageMaker developer guide); a call
with ``TargetVariant`` goes to that variant whatever its weight (a weight of 0 included).
The draw is an argument (``u`` uniform in [0, 1)), so the local AWS draws it from a random
generator and the traffic simulator from its own seeded one.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmelocal.errors import UserInputError
from mmelocal.facts.runtime_api import UNKNOWN_TARGET_VARIANT


def traffic_shares(weights: Sequence[float]) -> list[float]:
    """Each variant's share of the calls without ``TargetVariant`` (they sum to 1).

    All weights 0 (an endpoint being drained by weight) shares the traffic equally: the
    service's answer in that case is not documented, and refusing every call would lose
    them.
    """
    if not weights:
        raise UserInputError("an endpoint needs at least one production variant")
    if any(w < 0 for w in weights):
        raise UserInputError(f"variant weights must be >= 0, got {list(weights)}")
    total = float(sum(weights))
    if total == 0.0:
        return [1.0 / len(weights)] * len(weights)
    return [w / total for w in weights]


def choose_variant(weights: Sequence[float], u: float) -> int:
    """The index of the variant that serves a call whose uniform draw is ``u`` in [0, 1)."""
    if not 0.0 <= u < 1.0:
        raise UserInputError(f"u must lie in [0, 1), got {u}")
    shares = traffic_shares(weights)
    edge = 0.0
    for index, share in enumerate(shares):
        edge += share
        if u < edge and share > 0.0:
            return index
    # rounding left u past the last edge: the last variant with a share
    return max(i for i, share in enumerate(shares) if share > 0.0)


def target_variant_error(wanted: str, endpoint: str, variants: Sequence[str]) -> str | None:
    """The service's ``ValidationError`` message for a ``TargetVariant`` the endpoint
    ``endpoint`` does not have among ``variants`` (None when it has it): the one check of
    the local AWS and of ``mmelocal serve``."""
    if wanted in variants:
        return None
    return UNKNOWN_TARGET_VARIANT.format(
        variant=wanted[:80], endpoint=endpoint, valid=", ".join(variants)
    )


__all__ = ["choose_variant", "target_variant_error", "traffic_shares"]
