"""No identifier or value reaches Spark SQL unquoted.

Source names (databases, tables, columns) and values come from the change stream, i.e. from
whoever can write to the source database: they are hostile input. This test reads every
module of the package and checks each ``spark.sql(...)`` call: the statement is a constant,
or an f-string whose every interpolation is built by a quoting function
(``quote_identifier``, ``_sql_string``, or a helper made only of them), directly or through a
local variable assigned from one. The one statement taken as it is, ``tidelake query``'s,
is the operator's own SQL. ``test_quoting_functions_escape_what_they_must`` proves the
quoting functions themselves; tests/integration/lake/test_hostile_input_e2e.py lands tables
named to break out of quoting and reads them back through Spark SQL.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tidelake.lake.catalog import _sql_string, quote_identifier

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "tidelake"

#: Functions whose result is quoted SQL text.
QUOTERS = {"quote_identifier", "_sql_string"}
#: Statements taken as they are, and why that is right.
TRUSTED = {
    ("lake/query.py", "run_spark", "sql"): "the operator's own query (`tidelake query`)",
    ("view/maintain.py", "_run_definition", "sql"): (
        "the operator's own view definition (views.<name>.sql); renamed columns enter it as "
        "quoted identifiers (view/definition.py follow_renames)"
    ),
}


def _sql_calls(tree: ast.AST) -> list[tuple[ast.Call, ast.FunctionDef | None]]:
    """Every ``<...spark>.sql(arg)`` call with its enclosing function."""
    out: list[tuple[ast.Call, ast.FunctionDef | None]] = []

    def visit(node: ast.AST, func: ast.FunctionDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef) else func
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr == "sql"
                and ast.unparse(child.func.value).split(".")[-1] == "spark"
            ):
                out.append((child, func))
            visit(child, inner)

    visit(tree, None)
    return out


class _Checker:
    """Decides whether an expression is quoted SQL, within one module."""

    def __init__(self, module: str, tree: ast.Module) -> None:
        self.module = module
        self.functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        # Helpers whose every return value is quoted (e.g. catalog._qualified).
        self.quoters = set(QUOTERS)
        changed = True
        while changed:
            changed = False
            for name, fn in self.functions.items():
                returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return)]
                if (
                    name not in self.quoters
                    and returns
                    and all(r is not None and self.quoted(r, fn) for r in returns)
                ):
                    self.quoters.add(name)
                    changed = True

    def quoted(self, expr: ast.expr, fn: ast.FunctionDef | None, depth: int = 0) -> bool:
        if depth > 5:
            return False
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return True
        if isinstance(expr, ast.JoinedStr):
            return all(
                self.quoted(v.value, fn, depth + 1)
                for v in expr.values
                if isinstance(v, ast.FormattedValue)
            )
        if isinstance(expr, ast.Call):
            callee = expr.func
            name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", "")
            return name in self.quoters
        if isinstance(expr, ast.Name) and fn is not None:
            return self._name_quoted(expr.id, fn, depth)
        return False

    def _name_quoted(self, name: str, fn: ast.FunctionDef, depth: int) -> bool:
        sources: list[ast.expr] = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == name:
                        sources.append(node.value)
                    elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        for t, v in zip(target.elts, node.value.elts, strict=True):
                            if isinstance(t, ast.Name) and t.id == name:
                                sources.append(v)
        params = [a.arg for a in fn.args.args]
        if name in params:
            if (self.module, fn.name, name) in TRUSTED:
                return True
            # A parameter: quoted if every caller in this module passes quoted text.
            index = params.index(name)
            calls = [
                n
                for n in ast.walk(ast.Module(body=list(self.functions.values()), type_ignores=[]))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn.name
            ]
            callers = {id(c): f for f in self.functions.values() for c in ast.walk(f) if c in calls}
            return bool(calls) and all(
                len(c.args) > index and self.quoted(c.args[index], callers.get(id(c)), depth + 1)
                for c in calls
            )
        return bool(sources) and all(self.quoted(s, fn, depth + 1) for s in sources)


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(p.relative_to(PACKAGE)), ast.parse(p.read_text(), str(p)))
        for p in sorted(PACKAGE.rglob("*.py"))
    ]


def test_every_spark_sql_statement_is_constant_or_built_from_quoted_parts() -> None:
    """Each spark.sql(...) in the package interpolates only quote_identifier/_sql_string
    output (or is the operator's own query); the list of offenders is empty."""
    offenders = []
    seen = 0
    for module, tree in _modules():
        checker = _Checker(module, tree)
        for call, fn in _sql_calls(tree):
            seen += 1
            if not call.args or not checker.quoted(call.args[0], fn):
                where = f"{module}:{call.lineno}"
                offenders.append(f"{where} {ast.unparse(call)}")
    assert [] == offenders
    assert seen >= 5  # the scan does find the catalog statements


def test_the_scan_catches_an_unquoted_interpolation() -> None:
    """The checker flags a statement that interpolates a raw name, and accepts the quoted one."""
    tree = ast.parse(
        "def bad(spark, table):\n"
        "    spark.sql(f'DROP TABLE {table}')\n"
        "def good(spark, table):\n"
        "    name = quote_identifier(table)\n"
        "    spark.sql(f'DROP TABLE {name}')\n"
    )
    checker = _Checker("x.py", tree)
    verdicts = {
        fn.name if fn else None: checker.quoted(c.args[0], fn) for c, fn in _sql_calls(tree)
    }
    assert {"bad": False, "good": True} == verdicts


@pytest.mark.parametrize(
    ("name", "quoted"),
    [
        ("orders", "`orders`"),
        ("o`rders", "`o``rders`"),
        ("x`; DROP DATABASE shop; --", "`x``; DROP DATABASE shop; --`"),
        ("``", "``````"),
    ],
)
def test_quoting_functions_escape_what_they_must(name: str, quoted: str) -> None:
    """Backticks are doubled inside identifiers; quotes and backslashes are escaped in strings."""
    assert quoted == quote_identifier(name)
    assert "'it\\'s \\\\ here'" == _sql_string("it's \\ here")
