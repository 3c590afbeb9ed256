"""The test tree itself: pytest's default import mode needs unique module basenames."""

import importlib.util
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    """Two test files with one basename break collection of the whole suite."""
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert {} == {name: n for name, n in names.items() if n > 1}


def test_every_worker_group_names_a_test_directory() -> None:
    """A group whose directory was renamed would silently stop holding its tests together."""
    spec = importlib.util.spec_from_file_location("tests_root_conftest", TESTS / "conftest.py")
    assert spec is not None
    assert spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    groups, group_of = conftest.GROUPS, conftest.group_of

    root = TESTS.parent
    assert [] == [prefix for prefix in groups if not (root / prefix).is_dir()]
    assert group_of("tests/integration/lake/test_x.py::test_y[1]") == "spark"
    assert group_of("tests/unit/test_cli.py::test_z") == "tests/unit/test_cli.py"
