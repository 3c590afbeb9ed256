"""runtime/extras.py and ``cli.main``: the base install (no extras) runs the command line, the
bus, the stager and the API, and a verb needing an extra names it instead of a traceback.

The base install is simulated in a child interpreter whose imports of the extras' modules
fail as they would when the packages are absent (the suite's own venv has them all)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tidelake.runtime.extras import EXTRA_MODULES, command_extras, extra_for_module

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = {blocked!r}
    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None
    sys.meta_path.insert(0, Absent())
    import importlib.util
    importlib.util.find_spec = lambda name, package=None: (
        None if name.split(".")[0] in BLOCKED else _find_spec(name, package))
    """
)
ALL_EXTRA_MODULES = sorted({m for mods in EXTRA_MODULES.values() for m in mods} | {"py4j"})


def _without_extras(code: str) -> subprocess.CompletedProcess[str]:
    prelude = "import importlib.util\n_find_spec = importlib.util.find_spec\n"
    script = prelude + BLOCKER.format(blocked=ALL_EXTRA_MODULES) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("verb", "args", "expected"),
    [
        ("demo", [], ["spark"]),
        ("demo", ["--source", "mariadb", "--object-store", "minio"], ["spark", "capture", "s3"]),
        ("chaos", ["--stage-store", "local", "--source", "workload"], ["spark"]),
        ("chaos", ["--stage-store=s3", "--source", "mariadb"], ["spark", "capture", "s3"]),
        ("capture", [], ["capture"]),
        ("capture", ["kafka", "-c", "x.yaml"], ["kafka"]),
        ("demo", ["--with-ddl", "--trino"], ["spark", "trino"]),
        ("demo", ["--kafka", "--json"], ["spark", "kafka"]),
        ("stage", [], []),
        ("serve", [], []),
        ("demo", ["--help"], []),
        (None, [], []),
    ],
)
def test_what_each_command_needs(verb: str | None, args: list[str], expected: list[str]) -> None:
    """Verbs map to extras, options add theirs (only the values that need them); help and
    the base verbs need none."""
    assert expected == command_extras(verb, args)


def test_modules_map_to_their_extra() -> None:
    """A missing module found later is traced to the extra that provides it."""
    expected = ["spark", "spark", "capture", "s3", None, None]
    names = ["pyspark.sql", "hudi", "psycopg2.extras", "botocore.config", "nats", None]
    assert expected == [extra_for_module(n) for n in names]


def test_base_install_imports_the_cli_bus_stager_and_api() -> None:
    """Without any extra, every module of the CLI, the bus, the stager and the API imports."""
    res = _without_extras(
        """
        import importlib, pkgutil, tidelake
        failed = []
        for pkg in ("cli", "bus", "stage", "api", "formats", "runtime"):
            base = importlib.import_module(f"tidelake.{pkg}")
            for m in pkgutil.walk_packages(base.__path__, f"tidelake.{pkg}."):
                # cli.__main__ runs the program; cli.submit is the spark-submit launcher.
                if m.name.endswith(("__main__", "cli.submit")):
                    continue
                try:
                    importlib.import_module(m.name)
                except ImportError as exc:
                    failed.append(f"{m.name}: {exc}")
        print(failed)
        """
    )
    assert ("[]", 0) == (res.stdout.strip(), res.returncode), res.stderr[-2000:]


def test_a_verb_without_its_extra_names_the_pip_line() -> None:
    """``tidelake demo`` on the base install exits 2 with ``pip install 'tidelake[spark]'``;
    its ``--help`` still works."""
    res = _without_extras(
        """
        import sys
        from tidelake.cli import main
        sys.argv = ["tidelake", "demo"]
        main()
        """
    )
    message = " ".join(res.stderr.split())
    assert 2 == res.returncode, res.stderr[-2000:]
    assert "pip install 'tidelake[spark]'" in message
    assert "not installed: pyspark" in message
    help_res = _without_extras(
        """
        import sys
        from tidelake.cli import main
        sys.argv = ["tidelake", "demo", "--help"]
        main()
        """
    )
    assert (0, True) == (help_res.returncode, "Usage" in help_res.stdout), help_res.stderr[-2000:]
