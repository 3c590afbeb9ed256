"""The bench result: its JSON shape, its targets and its Markdown."""

from pathlib import Path

import orjson
import pytest
from rich.console import Console

from tidelake_bench.report import (
    HEADLINE,
    RUNS_HEADING,
    BenchResult,
    append_run,
    derive,
    load_result,
    render_markdown,
    save_result,
)
from tidelake_bench.runner import parse_variant


def _result(**numbers: object) -> BenchResult:
    result = BenchResult(quick=True, machine={"nproc": 2, "cpu_model": "test CPU"})
    result.numbers = dict(numbers) | derive(dict(numbers))
    result.load = {"start": [1.0, 2.0, 3.0], "end": [1.5, 2.0, 3.0]}
    return result


def test_json_holds_every_headline_key_even_when_not_measured() -> None:
    """The issue's seven keys are always there; what was not measured is null."""
    out = _result(stage_events_per_s=1000.0).to_json()
    assert set(HEADLINE) <= set(out)
    assert 1000.0 == out["stage_events_per_s"]
    assert None is out["hoodiestreamer_records_per_s"]
    # One line of JSON: what `tidelake bench --json` prints last.
    assert out == orjson.loads(orjson.dumps(out))


def test_ratios_are_derived_from_the_numbers() -> None:
    """Stager vs nats bench, ingest vs each contender, commit growth."""
    derived = derive(
        {
            "stage_events_per_s": 20_000.0,
            "nats_bench_events_per_s": 40_000.0,
            "ingest_records_per_s": 3_000.0,
            "hoodiestreamer_records_per_s": 2_000.0,
            "commit_s_small": 2.0,
            "commit_s_large": 2.4,
        }
    )
    assert 0.5 == derived["stage_vs_nats_bench"]
    assert 1.5 == derived["ingest_vs_hoodiestreamer"]
    assert 1.2 == derived["commit_growth"]
    assert None is derived["ingest_vs_parquet"]


def test_targets_are_met_or_not_or_unknown() -> None:
    """Each of the issue's targets is checked; one without a number is neither met nor not."""
    targets = _result(
        freshness_rate=1_000,
        freshness_seconds=600,
        freshness_publish_events_per_s=1_000.0,
        freshness_p99_s=12.0,
        stage_events_per_s=20_000.0,
        nats_bench_events_per_s=30_000.0,
        stage_events_per_cpu_s=30_000.0,
    ).targets()
    assert False is targets["freshness_p99"]["met"]
    assert None is targets["freshness_p99_high"]["met"]
    assert False is targets["stager"]["met"]  # 0.667x nats bench, 30,000 per CPU second
    assert None is targets["ingest"]["met"]
    assert None is targets["ingest_vs_hoodiestreamer"]["met"]
    assert None is targets["commit_growth"]["met"]
    stager = _result(
        stage_events_per_s=30_000.0,
        nats_bench_events_per_s=40_000.0,
        stage_events_per_cpu_s=100_000.0,
    ).targets()["stager"]
    assert {"events_per_cpu_s": 100_000.0, "vs_nats_bench": 0.75} == stager["value"]
    assert True is stager["met"]


def test_freshness_is_met_only_when_sustained_at_the_rate_asked() -> None:
    """A p99 within the limit counts only for a 10-minute run that reached 95% of its rate and
    left the lake equal to the source; a p99 above the limit fails any run."""

    def met(**numbers: object) -> bool | None:
        base: dict[str, object] = {
            "freshness_high_rate": 10_000,
            "freshness_high_seconds": 600,
            "freshness_high_publish_events_per_s": 9_600.0,
            "freshness_high_p99_s": 4.0,
            "freshness_high_mismatches": 0,
        }
        return _result(**(base | numbers)).targets()["freshness_p99_high"]["met"]

    assert True is met()
    assert None is met(freshness_high_seconds=45)
    assert None is met(freshness_high_publish_events_per_s=9_000.0)
    assert False is met(freshness_high_p99_s=5.5)
    assert False is met(freshness_high_p99_s=5.5, freshness_high_seconds=45)
    assert False is met(freshness_high_mismatches=3)


def test_ingest_goal_needs_rate_cpu_and_datasource_ratio() -> None:
    """Into the 10M-row table: 20,000 changes/s, 10,000 per CPU second, 1.5x the datasource."""
    numbers = {
        "ingest_records_per_s_large": 21_000.0,
        "ingest_records_per_cpu_s_large": 11_000.0,
        "ingest_records_per_s": 3_000.0,
        "hudi_datasource_records_per_s": 2_000.0,
    }
    assert True is _result(**numbers).targets()["ingest"]["met"]
    slow = numbers | {"ingest_records_per_cpu_s_large": 9_000.0}
    assert False is _result(**slow).targets()["ingest"]["met"]
    partial = {k: v for k, v in numbers.items() if k != "hudi_datasource_records_per_s"}
    assert None is _result(**partial).targets()["ingest"]["met"]


def test_hoodiestreamer_is_bridged_through_the_datasource_writers_when_not_same_hudi() -> None:
    """(tidelake / datasource, Hudi 1.1.1) x (datasource / HoodieStreamer, Hudi 0.14); the
    target is decided by it only while the same-Hudi comparison is missing."""
    numbers = {
        "ingest_records_per_s": 900.0,
        "hudi_datasource_records_per_s": 1_000.0,
        "hudi_datasource_0_14_records_per_s": 800.0,
        "hoodiestreamer_0_14_records_per_s": 400.0,
    }
    derived = derive(numbers)
    assert 0.5 == derived["hoodiestreamer_vs_hudi_datasource_0_14"]
    assert 1.8 == derived["ingest_vs_hoodiestreamer_bridged"]
    assert None is derived["ingest_vs_hoodiestreamer"]
    target = _result(**numbers).targets()["ingest_vs_hoodiestreamer"]
    assert {"same_hudi": None, "bridged_via_hudi_0_14": 1.8} == target["value"]
    assert True is target["met"]
    same = _result(**numbers, hoodiestreamer_records_per_s=900.0).targets()
    assert False is same["ingest_vs_hoodiestreamer"]["met"]  # 1.0x decides over 1.8x
    assert None is derive({"ingest_records_per_s": 900.0})["ingest_vs_hoodiestreamer_bridged"]


def test_runs_are_appended_under_the_runs_heading(tmp_path: Path) -> None:
    """The method stays on top; each run adds a section with machine, load and numbers."""
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nMethod.\n")
    result = _result(freshness_p50_s=2.5)
    result.errors = ["hoodiestreamer: jar missing"]
    append_run(doc, result)
    append_run(doc, result)
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nMethod.\n")
    assert 1 == text.count(RUNS_HEADING)
    assert 2 == text.count("### Run")
    assert "2 CPUs (test CPU)" in text
    assert "start 1.0 / 2.0 / 3.0" in text
    assert "| freshness p50 s | 2.5 |" in text
    assert "- hoodiestreamer: jar missing" in text


def test_a_run_of_some_parts_shows_only_what_it_measured() -> None:
    """``--part capture --part snapshot``: their rows and targets, no row of '—' per part
    that did not run, no sizes line of zeros; the snapshot's rows/s are a row of their own."""
    result = _result(
        **{
            "capture_changes_per_s[postgres]": 23_341.7,
            "capture_changes_per_s[mysql]": 8_499.5,
            "snapshot_rows[mysql]": 10_000_000,
            "snapshot_rows_per_s[mysql]": 84_434,
            "snapshot_rows_per_s[postgres]": 238_311,
        }
    )
    text = render_markdown(result)
    assert "| capture PostgreSQL: changes/s (wall) | 23,342 |" in text
    assert "| snapshot MariaDB: rows | 10,000,000 |" in text
    assert "| snapshot PostgreSQL: rows/s (incremental, parallel chunks) | 238,311 |" in text
    assert "—" not in text.split("\n", 1)[1]  # the title's dash only
    assert "Sizes:" not in text
    assert "freshness" not in text
    assert "| capture >= 20,000 changes/s per process, MariaDB and PostgreSQL |" in text
    assert "mysql 8,500, postgres 23,342 | no |" in text
    assert "(10M rows), MariaDB and PostgreSQL | mysql 84,434, postgres 238,311 | yes |" in text
    full = render_markdown(_result(stage_events=20_000, freshness_rate=1_000.0,
                                   freshness_seconds=45.0))  # fmt: skip
    assert "Sizes: 20,000 messages staged; freshness at 1,000 events/s for 45 s." in full


def test_a_variant_names_its_hudi_options() -> None:
    """``--variant NAME:key=value,...`` for an optimisation measured in the same run."""
    assert ("lean", {"hoodie.metadata.enable": "false", "hoodie.write.markers.type": "DIRECT"}) == (
        parse_variant("lean:hoodie.metadata.enable=false, hoodie.write.markers.type=DIRECT")
    )
    with pytest.raises(ValueError, match="NAME:key=value"):
        parse_variant("no-colon")
    with pytest.raises(ValueError, match="key=value"):
        parse_variant("x:novalue")


def test_a_saved_result_loads_back_whole(tmp_path: Path) -> None:
    """What each part saves (``save_result``) is what ``--saved`` appends later."""
    result = _result(freshness_p50_s=2.5, stage_events_per_s=1000.0)
    result.details = {"stage": {"events": 10}}
    result.errors = ["tables: stopped"]
    path = tmp_path / "bench-progress.json"
    save_result(path, result)
    assert load_result(path) == result
    assert not list(tmp_path.glob("*.tmp"))


def test_each_part_saves_the_run_so_far(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped midway (a full one lasts hours) keeps the parts it finished: after each
    part the result so far, derived numbers included, is in the progress file."""
    from tidelake_bench import machine, runner, tools

    monkeypatch.setattr(tools, "nats_cli", lambda: None)
    monkeypatch.setattr(machine, "machine", lambda: {"nproc": 2})
    monkeypatch.setattr(machine, "versions", lambda nats=None: {})
    monkeypatch.setattr(machine, "load_average", lambda: [1.0, 1.0, 1.0])
    progress = tmp_path / "bench-progress.json"
    seen: list[BenchResult] = []

    def nats_sync(home: Path, sizes: object, n: dict, result: BenchResult, log: object) -> None:
        n["stage_events_per_s"] = 100.0
        n["nats_bench_events_per_s"] = 400.0

    def capture(home: Path, sizes: object, n: dict, result: BenchResult, log: object) -> None:
        seen.append(load_result(progress))
        raise RuntimeError("capture broke")

    monkeypatch.setattr(runner, "_nats_sync", nats_sync)
    monkeypatch.setattr(runner, "_capture", capture)
    opts = runner.BenchOptions(
        quick=True, home=tmp_path / "bench", parts=("nats_sync", "capture"), progress=progress
    )
    final = runner.run_bench(opts, Console(quiet=True))
    after_first = seen[0]
    assert after_first.numbers["stage_vs_nats_bench"] == 0.25
    assert set(after_first.load) == {"start", "nats_sync start", "nats_sync end"}
    assert after_first.errors == []
    saved = load_result(progress)
    assert saved.errors == ["capture: RuntimeError: capture broke"]
    assert saved.numbers == final.numbers
