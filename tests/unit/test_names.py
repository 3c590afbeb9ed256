"""names.py: every name derived from a source (database, table) pair is injective and, where
a reader needs the pair back, reversible (issue 23, deliver 5: "Names are data")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelake import names
from tidelake.lake.store import discover_tables

#: Any name a source could send: every Unicode scalar but NUL and the surrogates.
NAME = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=64,
)
#: Names with the characters that caused the collisions: dots, backticks, underscores, case.
TRICKY = st.text(st.sampled_from("aA_.`~%/ -é\u212a0"), min_size=1, max_size=8)
ANY_NAME = st.one_of(NAME, TRICKY)
PAIR = st.tuples(ANY_NAME, ANY_NAME)


@given(PAIR)
def test_table_id_round_trips(pair: tuple[str, str]) -> None:
    """split_table_id(table_id(db, t)) == (db, t) for any names (dots and backticks too)."""
    assert pair == names.split_table_id(names.table_id(*pair))


@given(PAIR, PAIR)
def test_derived_names_are_injective(a: tuple[str, str], b: tuple[str, str]) -> None:
    """Two different tables never share a table id, lake path, staged file or Hudi name."""
    if a == b:
        return

    def derived(pair: tuple[str, str]) -> list[str]:
        out = [names.table_id(*pair), names.stage_file_name(*pair), names.hudi_table_name(*pair)]
        try:
            out.append(names.lake_path("/lake", *pair))
        except ValueError:
            out.append(repr(pair))  # too long for a path: refused by the stager first
        return out

    assert all(x != y for x, y in zip(derived(a), derived(b), strict=True))


@given(PAIR)
def test_hudi_names_are_avro_names_and_reversible(pair: tuple[str, str]) -> None:
    """A Hudi table name is ``[A-Za-z_][A-Za-z0-9_]*`` and parses back to its pair."""
    name = names.hudi_table_name(*pair)
    assert (True, pair) == (
        bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)),
        names.parse_hudi_table_name(name),
    )


@given(NAME)
@settings(max_examples=300)
def test_lake_segments_are_reversible_and_never_hidden(name: str) -> None:
    """A lake path segment decodes to its name, holds no ``/``, and starts with neither
    ``.`` nor ``_`` (Spark and Hadoop skip those; ``_tidelake`` is the state directory)."""
    segment = names.lake_segment(name)
    assert (name, False, False) == (
        names.segment_name(segment),
        "/" in segment,
        segment.startswith((".", "_")),
    )


@given(ANY_NAME, ANY_NAME)
def test_catalog_names_differ_ignoring_case(a: str, b: str) -> None:
    """Catalog names are ``[a-z0-9_]+`` (all Spark's catalog accepts), differ for different
    source names even compared ignoring case (Spark's catalog does), and parse back."""
    ca, cb = names.catalog_name(a), names.catalog_name(b)
    assert (a, b) == (names.parse_catalog_name(ca), names.parse_catalog_name(cb))
    assert (a == b, True) == (ca.lower() == cb.lower(), bool(re.fullmatch(r"[a-z0-9_]+", ca)))


def test_plain_names_keep_todays_layout() -> None:
    """Existing lakes keep working: plain lowercase names map as tidelake always mapped them."""
    expected = ("shop.orders", "/lake/shop/orders", "shop.orders.jsonl", "shop_orders", "orders")
    actual = (
        names.table_id("shop", "orders"),
        names.lake_path("/lake", "shop", "orders"),
        names.stage_file_name("shop", "orders"),
        names.hudi_table_name("shop", "orders"),
        names.catalog_name("orders"),
    )
    assert expected == actual


def test_the_probes_map_apart() -> None:
    """The issue's probes: `a.b`.`c` vs `a`.`b.c`, a_b.c vs a.b_c, Shop.Orders vs shop.orders,
    _tidelake, a leading dot and a path-traversal name."""
    expected = {
        "ids": ("`a.b`.c", "a.`b.c`"),
        "staged": ("a%2Eb.c.jsonl", "a.b%2Ec.jsonl"),
        "hudi": ("a_5f_b__c", "a__b_5f_c"),
        "catalog": ("_shop_x1._orders_x1", "shop.orders"),
        "reserved": "/lake/%5Ftidelake/t",
        "dot": "/lake/%2Ehidden/t",
        "traversal": "/lake/%2E.%2F..%2Fmanifests%2F1-99999999999999999999-evil/t",
        "traversal_staged": "%2E%2E%2F%2E%2E%2Fmanifests%2F1-99999999999999999999-evil.t.jsonl",
    }
    evil = "../../manifests/1-99999999999999999999-evil"
    actual = {
        "ids": (names.table_id("a.b", "c"), names.table_id("a", "b.c")),
        "staged": (names.stage_file_name("a.b", "c"), names.stage_file_name("a", "b.c")),
        "hudi": (names.hudi_table_name("a_b", "c"), names.hudi_table_name("a", "b_c")),
        "catalog": (
            f"{names.catalog_name('Shop')}.{names.catalog_name('Orders')}",
            f"{names.catalog_name('shop')}.{names.catalog_name('orders')}",
        ),
        "reserved": names.lake_path("/lake", "_tidelake", "t"),
        "dot": names.lake_path("/lake", ".hidden", "t"),
        "traversal": names.lake_path("/lake", evil, "t"),
        "traversal_staged": names.stage_file_name(evil, "t"),
    }
    assert expected == actual


def test_a_long_name_in_any_script_fits_one_path_segment() -> None:
    """64 CJK characters (a legal MySQL name) fit a 255-byte segment and decode back."""
    name = "表" * 64
    segment = names.lake_segment(name)
    assert (name, True) == (names.segment_name(segment), len(segment.encode()) <= 255)


def test_discovery_gives_back_the_names(tmp_path: Path) -> None:
    """discover_tables reads the source names back from the encoded lake paths."""
    pairs = [("_tidelake", "t"), (".x", "_y"), ("a.b", "c"), ("Shop", "Orders")]
    for pair in pairs:
        meta = Path(names.lake_path(str(tmp_path), *pair)) / ".hoodie"
        meta.mkdir(parents=True)
        (meta / "hoodie.properties").write_text("hoodie.table.name=x\n")
    expected = sorted(names.table_id(*p) for p in pairs)
    assert expected == sorted(t.table_id for t in discover_tables(None, str(tmp_path)))


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("orders", "tidb", None),
        ("a" * 64, "mysql", None),
        ("a" * 65, "tidb", "is 65 characters"),
        ("é" * 32, "postgres", "is 64 bytes"),
        ("a\x00b", "debezium-postgresql", "NUL"),
        ("a" * 256, "canal", "is 256 characters"),
        ("x ", "mysql", "ends with a space"),
        ("\ud800", "tidb", "not valid Unicode"),
        ("", "tidb", "empty"),
        ("\U0001f600", "postgres", None),
        ("\U0001f600", "mysql", "does not allow"),
    ],
)
def test_name_rules_per_producer(name: str, source: str, expected: str | None) -> None:
    """Illegal names are refused with a reason naming the rule; legal ones pass."""
    problem = names.name_problem(name, kind="table", source=source)
    actual = None if problem is None else expected if expected in problem else problem
    assert expected == actual


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        (["id", "name"], None),
        (["id", "_tl_op"], "'_tl_op' uses a prefix reserved"),
        (["id", "_HOODIE_x"], "'_HOODIE_x' uses a prefix reserved"),
        (["Id", "id"], "'Id' and 'id' differ only in case"),
    ],
)
def test_column_rules(columns: list[str], expected: str | None) -> None:
    """Reserved prefixes and case-only collisions are refused with a clear reason."""
    problem = names.columns_problem(columns)
    actual = None if problem is None else expected if expected in problem else problem
    assert expected == actual


def test_a_table_written_at_its_older_path_stays_there(tmp_path: Path) -> None:
    """Upgrading moves no table: ``_x.t`` written before names.py (at ``<lake>/_x/t``) is
    still found there; a new table of that name goes to ``<lake>/%5Fx/t``."""
    from tidelake.lake.hudi import table_path

    new = table_path(str(tmp_path), "_y", "t")
    old = tmp_path / "_x" / "t" / ".hoodie"
    old.mkdir(parents=True)
    (old / "hoodie.properties").write_text("hoodie.table.name=_x_t\n")
    expected = (str(tmp_path / "_x" / "t"), f"{tmp_path}/%5Fy/t")
    assert expected == (table_path(str(tmp_path), "_x", "t"), new)
