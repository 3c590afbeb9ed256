"""``tidelake bench`` is a thin entry point: the bench lives in the checkout's ``bench/``, is
not in the wheel, and uses tidelake through its public names only."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import tidelake

REPO = Path(__file__).resolve().parents[3]
BENCH_PACKAGE = REPO / "bench" / "tidelake_bench"


def _installed_copy(tmp_path: Path) -> Path:
    """The tidelake package copied outside any checkout, as a wheel install puts it."""
    site = tmp_path / "site"
    shutil.copytree(
        Path(tidelake.__file__).parent,
        site / "tidelake",
        ignore=shutil.ignore_patterns("__pycache__", "static"),
    )
    return site


def _bench(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "bench", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_bench_without_a_checkout_exits_2_and_says_where_it_runs(tmp_path: Path) -> None:
    """Installed without the repository (and run outside it), the verb refuses with exit 2
    and names the source checkout, before measuring anything."""
    site = _installed_copy(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    proc = _bench(site, tmp_path / "elsewhere", "--part", "stage")
    assert 2 == proc.returncode
    assert "runs from a source checkout" in " ".join((proc.stdout + proc.stderr).split())


def test_bench_finds_the_checkout_from_the_working_directory(tmp_path: Path) -> None:
    """Installed outside the checkout but run inside it (here: its bench/ directory), the
    verb imports the checkout's bench package: an unknown part is then its own error."""
    site = _installed_copy(tmp_path)
    proc = _bench(site, REPO / "bench", "--part", "nope")
    assert 2 == proc.returncode
    assert "unknown --part nope" in proc.stdout + proc.stderr


def _private_uses(path: Path) -> list[str]:
    """``_name`` imported from tidelake, or any ``x._name`` other than ``self._name``."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tidelake"):
            parts = (node.module or "").split(".") + [a.name for a in node.names]
            found += [f"{path.name}:{node.lineno} {p}" for p in parts if p.startswith("_")]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_bench_uses_only_public_names_of_tidelake() -> None:
    """The bench is a client of tidelake like any other: no private module, name or
    attribute of it (the standalone Hudi 0.14 worker imports no tidelake at all)."""
    uses = [use for path in sorted(BENCH_PACKAGE.glob("*.py")) for use in _private_uses(path)]
    assert [] == uses
    worker = ast.parse((REPO / "bench" / "hudi014_worker.py").read_text())
    imported = {
        name.split(".")[0]
        for node in ast.walk(worker)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert "tidelake" not in imported
    assert "tidelake_bench" not in imported


def test_the_product_package_holds_no_bench() -> None:
    """The wheel is built from src/ (packages.find: tidelake*): no bench code is in there."""
    src = Path(tidelake.__file__).parent
    assert [] == sorted(str(p.relative_to(src)) for p in src.rglob("*bench*.py"))
    assert not (src / "bench").exists()


def test_a_saved_run_is_appended_to_the_docs_without_running(tmp_path: Path) -> None:
    """``--saved FILE --docs DOC`` appends what a stopped run saved; without ``--docs`` it
    is refused with exit 2."""
    from tidelake_bench.report import BenchResult, save_result

    result = BenchResult(quick=False, numbers={"freshness_p50_s": 7.5})
    result.errors = ["tables: stopped by hand"]
    saved = tmp_path / "bench-progress.json"
    save_result(saved, result)
    site = _installed_copy(tmp_path)
    refused = _bench(site, REPO, "--saved", str(saved))
    assert 2 == refused.returncode
    assert "--saved needs --docs" in refused.stdout + refused.stderr
    doc = tmp_path / "benchmarks.md"
    proc = _bench(site, REPO, "--saved", str(saved), "--docs", str(doc))
    assert 0 == proc.returncode, proc.stderr
    text = doc.read_text()
    assert "| freshness p50 s | 7.5 |" in text
    assert "- tables: stopped by hand" in text
