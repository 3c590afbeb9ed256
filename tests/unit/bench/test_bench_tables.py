"""The many-tables part: rounds read from the commit log, the issue-21 target, its report."""

import pytest

from tidelake.lake.ledger import CommitRecord
from tidelake.pipeline.demo import DemoResult
from tidelake_bench.memory import PeakRss
from tidelake_bench.report import BenchResult, render_markdown, tables_target
from tidelake_bench.tables import TablesResult, ingest_rounds


def _commit(table: str, seq: int, end_ms: int, ms: int, seq_from: int = 1, ddl: int = 0) -> (
    CommitRecord
):  # fmt: skip
    return CommitRecord(
        table=table, seq=seq, seq_from=seq_from, committed_at_ms=end_ms, duration_ms=ms, ddl=ddl
    )


def test_rounds_are_the_commits_that_share_the_sequence_read_through() -> None:
    """A round spans from its first commit's start to its last commit's end; a DDL commit is
    no round of rows, and commits that created their table are counted."""
    commits = [
        _commit("shop.a", 100, end_ms=11_000, ms=1_000, seq_from=0),
        _commit("shop.b", 100, end_ms=12_500, ms=2_000, seq_from=0),
        _commit("shop.a", 250, end_ms=20_000, ms=1_000),
        _commit("shop.c", 180, end_ms=15_000, ms=500, ddl=1),
        _commit("shop.b", 250, end_ms=21_000, ms=1_500),
        _commit("shop.c", 250, end_ms=19_800, ms=300),
    ]
    rounds = ingest_rounds(commits)
    assert [(100, 2, 2.5, 2), (250, 3, 2.0, 0)] == [
        (r.seq, r.commits, r.span_s, r.created) for r in rounds
    ]


def test_rounds_that_created_tables_are_kept_apart_from_tables_at_work() -> None:
    """Round figures describe tables at work; creating commits have their own median."""
    result = TablesResult(tables=2, rate_per_table=10.0, seconds=60.0)
    result.record_rounds(
        [
            _commit("shop.a", 2, end_ms=30_000, ms=9_000, seq_from=0),
            _commit("shop.b", 2, end_ms=31_000, ms=7_000, seq_from=0),
            _commit("shop.a", 40, end_ms=40_000, ms=1_000, seq_from=2),
            _commit("shop.b", 40, end_ms=41_000, ms=1_000, seq_from=2),
            _commit("shop.a", 90, end_ms=50_000, ms=3_000, seq_from=40),
            _commit("shop.b", 90, end_ms=50_000, ms=2_000, seq_from=40),
        ]
    )
    assert 1 == result.create_rounds
    assert 8.0 == result.create_commit_s_p50
    assert 2 == result.rounds
    assert (2.5, 3.0, 2.0) == (result.round_s_p50, result.round_s_max, result.round_commits_mean)
    assert 1.5 == result.commit_s_p50


def test_fewer_tables_verified_than_run_is_an_error() -> None:
    """Every table must be in the lake: a table the verification did not reach is reported
    even when the tables it did reach are equal to the source."""
    result = TablesResult(tables=4, rate_per_table=10.0, seconds=60.0)
    result.record_demo(
        DemoResult(events=100, tables=3, mismatches=0, freshness_p99_s=5.0), tables=4
    )
    assert "1 of 4 tables were not verified" == result.error
    assert 0 == result.mismatches


def _goal(**over: object) -> dict[str, object]:
    numbers: dict[str, object] = {
        "tables_count": 1_000,
        "tables_events_per_s_per_table": 9.99,
        "tables_seconds": 600.0,
        "tables_freshness_p99_s": 29.5,
        "tables_not_visible": None,
        "tables_mismatches": 0,
        "tables_verified": 1_000,
    }
    return numbers | over


def test_the_tables_target_is_met_only_by_the_issues_whole_run() -> None:
    """1,000 tables at 10 events/s each (95% reached) for 10 minutes, p99 <= 30 s, the lake
    equal to the source: met. The measured value names each part of it."""
    value, met = tables_target(_goal())
    assert True is met
    expected = {"tables": 1_000, "events_per_s_each": 9.99, "seconds": 600.0, "p99_s": 29.5,
                "not_visible": None, "mismatches": 0}  # fmt: skip
    assert expected == value


@pytest.mark.parametrize(
    "short",
    [
        {"tables_count": 50, "tables_verified": 50},
        {"tables_events_per_s_per_table": 9.4},
        {"tables_seconds": 60.0},
        {"tables_freshness_p99_s": 30.5},
        {"tables_mismatches": 1},
        {"tables_mismatches": None},
        {"tables_verified": 999},
        {"tables_not_visible": 12},
    ],
)
def test_the_tables_target_is_not_met_when_any_part_falls_short(short: dict[str, object]) -> None:
    """Fewer tables, a slower publisher, a shorter run, a p99 above 30 s, a lake that differs
    or was not verified, or one that had not caught up (its p99 only a lower bound)."""
    assert False is tables_target(_goal(**short))[1]


def test_the_tables_target_is_unknown_without_a_freshness() -> None:
    """A part that did not run, or failed before measuring freshness, decides nothing."""
    assert None is tables_target({})[1]
    assert None is tables_target(_goal(tables_freshness_p99_s=None))[1]


def test_a_tables_run_reports_its_sizes_rows_and_target() -> None:
    """The Markdown names the sizes, shows the part's rows and the target, met or not."""
    result = BenchResult(quick=True, machine={"nproc": 2})
    result.numbers = _goal(
        tables_count=50,
        tables_verified=50,
        tables_rate_per_table=10.0,
        tables_seconds=60.0,
        tables_freshness_p99_s=111.4,
        tables_round_s_p50=57.5,
    )
    text = render_markdown(result)
    assert "Sizes: 50 tables at 10 events/s each for 60 s." in text
    assert "| tables: freshness p99 s | 111 |" in text
    assert "| tables: ingest round s p50 (first commit's start to last commit's end) | 57.5 |" in (
        text
    )
    assert "| 1,000 active tables at 10 events/s each: freshness p99 <= 30 s | tables 50," in text
    assert text.rstrip().endswith("mismatches 0 | no |")


def test_memory_peaks_per_window_show_whether_it_levels_off() -> None:
    """The sampled sum's peak per window from the first sample on; a window without a
    sample is None."""
    rss = PeakRss(lambda: [])
    rss.sums = [(100.0, 1024), (130.0, 4096), (161.0, 2048), (290.0, 3072)]
    assert [4.0, 2.0, None, 3.0] == rss.peaks_per_window(60.0)
    assert [] == PeakRss(lambda: []).peaks_per_window(60.0)
