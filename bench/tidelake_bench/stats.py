"""Small statistics the bench reports: percentiles and rates."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks
    (numpy's default): ``percentile([1, 2, 3, 4], 50) == 2.5``. None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def per_second(count: float, seconds: float) -> float | None:
    """``count / seconds`` rounded to one decimal; None when nothing was timed."""
    if seconds <= 0:
        return None
    return round(count / seconds, 1)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` to three decimals; None when either is missing or zero."""
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)
