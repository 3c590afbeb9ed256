"""The test tree itself: pytest's default import mode needs unique module basenames."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    """Two test files with one basename break collection of the whole suite."""
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert {} == {name: n for name, n in names.items() if n > 1}
