"""Every code reference and relative link in README.md and docs/*.md points into the repository.

A reference is a backticked repo-relative path starting with ``src/``, ``docs/`` or ``tests/``
(a glob such as ``tests/cases/ticdc_*`` must match something; a pytest node id
``tests/…/test_x.py::test_name`` must name a test defined in that file), or a relative
Markdown link ``[text](path)``, resolved from the document's own directory. A link that
leaves the repository is broken even when its target exists on this machine: a reader of a
clone or of the wheel's metadata does not have it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

_CODE_PATH = re.compile(r"`((?:src|docs|tests)/[^`\s]*)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", re.IGNORECASE)

#: References broken when this test was written, in files whose owner fixes them: each entry
#: must still be broken (a fixed one is removed here), and nothing else may be.
KNOWN_BROKEN: set[str] = set()


def _code_reference_problem(root: Path, reference: str) -> str | None:
    """Why a backticked ``src/…``/``docs/…``/``tests/…`` reference is broken, or None."""
    path_text, _, test_name = reference.partition("::")
    if any(c in path_text for c in "*?["):
        return None if any(root.glob(path_text)) else "matches nothing"
    path = root / path_text
    if not path.exists():
        return "does not exist"
    if test_name:
        function = test_name.split("[")[0].split("::")[-1]
        if not re.search(rf"^\s*(?:async )?def {re.escape(function)}\(", path.read_text(), re.M):
            return f"defines no {function}"
    return None


def _link_problem(root: Path, document: Path, target: str) -> str | None:
    """Why a relative Markdown link of ``document`` is broken, or None."""
    resolved = (document.parent / target.split("#")[0]).resolve()
    if not resolved.is_relative_to(root):
        return "outside the repository"
    return None if resolved.exists() else "does not exist"


def broken_references(root: Path, documents: list[Path]) -> set[str]:
    """``"<document>: <kind> <reference> (<problem>)"`` for every broken reference of the
    repository at ``root``."""
    broken = set()
    for document in documents:
        name = document.relative_to(root).as_posix()
        text = document.read_text()
        for reference in sorted(set(_CODE_PATH.findall(text))):
            problem = _code_reference_problem(root, reference.rstrip(".,;:"))
            if problem is not None:
                broken.add(f"{name}: path {reference} ({problem})")
        for target in sorted(set(_LINK.findall(text))):
            if _EXTERNAL.match(target):
                continue
            problem = _link_problem(root, document, target)
            if problem is not None:
                broken.add(f"{name}: link {target} ({problem})")
    return broken


def test_every_reference_in_the_docs_points_into_the_repository() -> None:
    """README.md and docs/*.md reference only paths, tests and documents the repo holds."""
    assert KNOWN_BROKEN == broken_references(REPO, DOCUMENTS)


def test_architecture_document_exists_and_is_checked() -> None:
    """docs/architecture.md, the design the code cites, is one of the checked documents."""
    assert REPO / "docs" / "architecture.md" in DOCUMENTS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see `src/pkg/events.py`.", set()),
        ("see `src/pkg/gone.py`", {"path src/pkg/gone.py"}),
        ("see `tests/cases/ticdc_*`", set()),
        ("see `tests/cases/debezium_*`", {"path tests/cases/debezium_*"}),
        ("see `tests/test_x.py::test_here[local]`", set()),
        ("see `tests/test_x.py::test_gone`", {"path tests/test_x.py::test_gone"}),
        ("[guarantees](guarantees.md) [other](../README.md#why)", set()),
        ("[gone](gone.md)", {"link gone.md"}),
        ("[design](../../DESIGN.md)", {"link ../../DESIGN.md"}),
        ("[site](https://hudi.apache.org/) [anchor](#layout)", set()),
    ],
)
def test_the_checker_finds_what_is_broken(tmp_path: Path, text: str, expected: set[str]) -> None:
    """The checker itself, on a small repository: good references pass; a missing file, a
    glob matching nothing, a missing test and a link leaving the repository are reported."""
    root = tmp_path / "repo"
    for path in ("README.md", "docs/guarantees.md", "src/pkg/events.py", "tests/cases/ticdc_a/x"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    (root / "tests" / "test_x.py").write_text("def test_here() -> None:\n    pass\n")
    document = root / "docs" / "architecture.md"
    document.write_text(text + "\n")
    prefix = "docs/architecture.md: "
    actual = {
        f.removeprefix(prefix).rsplit(" (", 1)[0] for f in broken_references(root, [document])
    }
    assert expected == actual
