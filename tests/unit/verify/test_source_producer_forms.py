"""verify's canonical text for the types whose lake form depends on the producer.

tidelake's own pgoutput capture keeps PostgreSQL's output text (SESSION_OPTIONS: IntervalStyle
``postgres``); Debezium sends its own forms. Facts from the producers' code:
- ``time with time zone``: PostgresValueConverter.convertTimeWithZone (debezium/debezium,
  debezium-connector-postgres) parses the text and shifts it ``withOffsetSameInstant(UTC)``;
  io.debezium.time.ZonedTime formats with ``ISO_OFFSET_TIME`` (``11:45:56.5Z``);
  PostgresTimeBoundary keeps ``24:00:00Z``.
- ``interval``: with ``interval.handling.mode=string`` convertInterval writes
  io.debezium.time.Interval.toIsoString: ``P<y>Y<m>M<d>DT<h>H<m>M<s>S``, every part, each
  with its own sign, seconds as a stripped BigDecimal. PostgreSQL's ``postgres`` style is
  datetime.c EncodeInterval/AddPostgresIntPart (postgres/postgres).
- arrays: the JsonConverter writes a Connect ARRAY as a JSON array; PostgreSQL's array_out
  writes ``{...}`` with quoted elements where needed.
- ``money``: convertMoney writes a Decimal of ``money.fraction.digits`` scale.
"""

from decimal import Decimal

import pytest

from tidelake.verify.source import comparable, interval_text, parse_interval


@pytest.mark.parametrize(
    ("postgres", "debezium", "expected"),
    [
        ("13:45:56.5+02", "11:45:56.5Z", "11:45:56.5Z"),
        ("23:59:59.999999-05", "04:59:59.999999Z", "04:59:59.999999Z"),
        ("00:30:00+05:30", "19:00:00Z", "19:00:00Z"),
        ("00:00:00+00", "00:00Z", "00:00:00Z"),
        ("24:00:00+00", "24:00:00Z", "24:00:00Z"),
    ],
)
def test_time_with_time_zone_is_the_utc_time_of_day(
    postgres: str, debezium: str, expected: str
) -> None:
    """PostgreSQL's timetz text and Debezium's ZonedTime (UTC) reduce to one UTC text."""
    assert (expected, expected) == (
        comparable(postgres, "time with time zone"),
        comparable(debezium, "time(6) with time zone"),
    )


def test_time_with_time_zone_keeps_the_instant() -> None:
    """Two times of day that are different instants stay different; an unknown text stays."""
    assert ("11:45:56.5Z", "13:45:56.5Z", "noon") == (
        comparable("13:45:56.5+02", "timetz"),
        comparable("13:45:56.5+00", "timetz"),
        comparable("noon", "timetz"),
    )


@pytest.mark.parametrize(
    ("postgres", "iso", "fields"),
    [
        ("1 year 2 mons 3 days 04:05:06.789", "P1Y2M3DT4H5M6.789S", (14, 3, 14_706_789_000)),
        ("-1 days -00:00:01", "P0Y0M-1DT0H0M-1S", (0, -1, -1_000_000)),
        ("-1 days +02:00:00", "P0Y0M-1DT2H0M0S", (0, -1, 7_200_000_000)),
        ("00:00:00.5", "P0Y0M0DT0H0M0.5S", (0, 0, 500_000)),
        ("10 mons", "P0Y10M0DT0H0M0S", (10, 0, 0)),
        ("-1 years -2 mons", "-P1Y2M", (-14, 0, 0)),
        ("-01:00:00", "PT-1H", (0, 0, -3_600_000_000)),
        ("00:00:00", "PT0S", (0, 0, 0)),
        ("1 day", "P1D", (0, 1, 0)),
        ("14 days", "P2W", (0, 14, 0)),
        ("00:00:00.000001", "P0Y0M0DT0H0M0.000001S", (0, 0, 1)),
        # PostgreSQL's own iso_8601 IntervalStyle output of the same values (a real server)
        ("-1 days +02:00:00", "P-1DT2H", (0, -1, 7_200_000_000)),
        ("-1 years -2 mons +3 days -04:00:00", "P-1Y-2M3DT-4H", (-14, 3, -14_400_000_000)),
        ("1 mon -1 days +23:59:59.999999", "P1M-1DT23H59M59.999999S", (1, -1, 86_399_999_999)),
        ("-00:00:00.000001", "PT-0.000001S", (0, 0, -1)),
        ("2562047788:00:54.775807", "PT2562047788H54.775807S", (0, 0, 2**63 - 1)),
    ],
)
def test_interval_postgres_style_and_iso_8601_meet(
    postgres: str, iso: str, fields: tuple[int, int, int]
) -> None:
    """Both spellings parse to PostgreSQL's (months, days, µs) and compare as the
    ``postgres`` style text, which is what PostgreSQL itself prints for those fields."""
    assert (fields, fields, postgres, postgres, postgres) == (
        parse_interval(postgres),
        parse_interval(iso),
        interval_text(*fields),
        comparable(postgres, "interval"),
        comparable(iso, "interval(6)"),
    )


def test_interval_fields_are_not_folded() -> None:
    """``1 day`` is not ``24:00:00`` (PostgreSQL keeps the fields apart); Debezium's default
    MicroDuration, folded into days and time, stays different from the months it lost;
    a text that is no interval stays itself."""
    assert ("1 day", "24:00:00", "1 year", "365 days 06:00:00", "soon") == (
        comparable("P1D", "interval"),
        comparable("PT24H", "interval"),
        comparable("P1Y", "interval"),
        comparable("365 days 06:00:00", "interval"),
        comparable("soon", "interval"),
    )


@pytest.mark.parametrize(
    ("literal", "json_text", "sql_type", "expected"),
    [
        ("{1,2,3}", "[1,2,3]", "integer[]", '["1","2","3"]'),
        ('{x,"y z",NULL}', '["x","y z",null]', "text[]", '["x","y z",null]'),
        ("{{1,2},{3,4}}", "[[1,2],[3,4]]", "_int4", '[["1","2"],["3","4"]]'),
        ('{"a\\"b","c\\\\d","NULL",""}', '["a\\"b","c\\\\d","NULL",""]', "text[]",
         '["a\\"b","c\\\\d","NULL",""]'),
        ("{}", "[]", "character varying(10)[]", "[]"),
        ("{t,f,NULL}", "[true,false,null]", "boolean[]", '["t","f",null]'),
        ("{1.5,NaN}", '[1.5,"NaN"]', "double precision[]", '["1.5","nan"]'),
        ("[0:1]={5,6}", "[5,6]", "integer[]", '["5","6"]'),
    ],
)  # fmt: skip
def test_array_literal_and_json_array_meet(
    literal: str, json_text: str, sql_type: str, expected: str
) -> None:
    """PostgreSQL's array literal (quotes, backslash escapes, NULL, nesting, bounds) and
    Debezium's JSON array reduce to one JSON text of the elements' texts."""
    assert (expected, expected) == (comparable(literal, sql_type), comparable(json_text, sql_type))


def test_array_elements_stay_distinct() -> None:
    """The string ``NULL`` is not a NULL element, order counts, and text that is neither a
    literal nor JSON stays itself."""
    assert ('["NULL"]', "[null]", '["2","1"]', "{1,2") == (
        comparable('{"NULL"}', "text[]"),
        comparable("{NULL}", "text[]"),
        comparable("[2,1]", "integer[]"),
        comparable("{1,2", "integer[]"),
    )


@pytest.mark.parametrize(
    ("cash_out", "debezium", "source", "expected"),
    [
        ("$1,234.56", "1234.56", Decimal("1234.56"), "1234.56"),
        ("-$0.01", "-0.01", Decimal("-0.01"), "-0.01"),
        ("$1,000.00", "1000.00", Decimal("1000.00"), "1000"),
        ("$0.00", "0.00", Decimal("0.00"), "0"),
    ],
)
def test_money_is_its_amount(cash_out: str, debezium: str, source: Decimal, expected: str) -> None:
    """cash_out's text (tidelake's capture), Debezium's Decimal and the source read as
    ``::numeric`` are one amount; an unknown text stays itself."""
    assert (expected, expected, expected, "1.234,56 EUR") == (
        comparable(cash_out, "money"),
        comparable(debezium, "money"),
        comparable(source, "money"),
        comparable("1.234,56 EUR", "money"),
    )


def test_other_types_are_compared_as_before() -> None:
    """Text, time without time zone and JSON keep their exact comparison."""
    assert ("$1,234.56", "13:45:56.5", '{"a":1}', "[1,2,3]") == (
        comparable("$1,234.56", "text"),
        comparable("13:45:56.5", "time without time zone"),
        comparable('{"a": 1}', "jsonb"),
        comparable("[1,2,3]", "text"),
    )
