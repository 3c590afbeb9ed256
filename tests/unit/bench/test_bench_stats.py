"""The bench's statistics: percentiles by linear interpolation, rates and ratios."""

import pytest

from tidelake_bench.stats import per_second, percentile, ratio


def test_percentile_interpolates_between_closest_ranks() -> None:
    """Numpy's default: p50 of 1..4 is 2.5, p0 and p100 are the extremes."""
    values = [4.0, 1.0, 3.0, 2.0]
    assert 2.5 == percentile(values, 50)
    assert 1.0 == percentile(values, 0)
    assert 4.0 == percentile(values, 100)


def test_p99_of_one_to_a_hundred() -> None:
    """p99 of 1..100 lies 0.01 of the way from 99 to 100 past rank 98."""
    assert pytest.approx(99.01) == percentile([float(x) for x in range(1, 101)], 99)


def test_percentile_of_nothing_is_none_and_of_one_value_is_it() -> None:
    """No values, no percentile; one value is every percentile."""
    assert None is percentile([], 99)
    assert 7.0 == percentile([7.0], 99)


def test_percentile_outside_0_100_is_refused() -> None:
    """A percentile is between 0 and 100."""
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)


def test_rates_and_ratios_are_none_when_undefined() -> None:
    """Zero seconds or a missing contender gives None, not a division error."""
    assert 2500.0 == per_second(5000, 2.0)
    assert None is per_second(5000, 0.0)
    assert 1.5 == ratio(3.0, 2.0)
    assert None is ratio(None, 2.0)
    assert None is ratio(3.0, None)
    assert None is ratio(3.0, 0.0)
