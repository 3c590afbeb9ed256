"""The import graph of ``src/tidelake`` keeps the layout docs/architecture.md §8 describes:
no import circle between modules, and no stage importing the faces above it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "tidelake"

#: The faces: the HTTP API, the command line and the local stack assembling the stages.
FACES = ("tidelake.api", "tidelake.cli", "tidelake.pipeline")
#: What the faces sit on: none of these may import a face.
STAGES = (
    "tidelake.events",
    "tidelake.errors",
    "tidelake.retry",
    "tidelake.config",
    "tidelake.formats",
    "tidelake.runtime",
    "tidelake.bus",
    "tidelake.capture",
    "tidelake.stage",
    "tidelake.route",
    "tidelake.lake",
    "tidelake.view",
    "tidelake.verify",
    "tidelake.workload",
)


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> Iterator[str]:
    """The tidelake modules ``path`` imports (at any depth of the file, typing-only too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in modules:
                yield name


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph = {}
    for module, path in files.items():
        # A package's own __init__ is imported by every module below it: not an edge.
        graph[module] = {
            m for m in _imports(path, modules) if m != module and not module.startswith(m + ".")
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_modules() -> None:
    """Every module can be understood after the ones it imports."""
    assert [] == _cycles(_graph())


def test_no_stage_imports_a_face() -> None:
    """The stages and their contracts never import the API, the CLI or the local stack."""
    backward = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        if module.startswith(STAGES)
        for target in targets
        if target.startswith(FACES)
    )
    assert [] == backward


def test_the_ingest_loop_stays_a_loop() -> None:
    """lake/ingest.py holds the round loop only; the rules, typing, Hudi access and state
    live in their own modules (issue: one room per job)."""
    lines = len((PACKAGE / "lake" / "ingest.py").read_text().splitlines())
    assert lines < 500, lines
