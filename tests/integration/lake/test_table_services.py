"""Table services on the real Hudi bundle: many small commits, a bounded number of files."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from lakekit import Lake, event

#: Commits written by the test; every one of them touches the same file group.
COMMITS = 10
#: What the table services are set to (lake.table_services.*).
DELTA_COMMITS = 2
RETAIN = 1


def _data_files(table_dir: Path) -> list[Path]:
    """Base (Parquet) and log files of the table, outside ``.hoodie``."""
    return [
        p
        for p in table_dir.rglob("*")
        if p.is_file()
        and ".hoodie" not in p.relative_to(table_dir).parts
        and (p.suffix == ".parquet" or ".log." in p.name)
    ]


def _completed_actions(table_dir: Path) -> Counter[str]:
    """Completed instants of the timeline by action (Hudi 1.x: ``.hoodie/timeline/``)."""
    actions: Counter[str] = Counter()
    for p in (table_dir / ".hoodie" / "timeline").glob("*"):
        stem, _, action = p.name.partition(".")
        if "_" in stem and p.is_file():  # <requested>_<completed>.<action>: completed
            actions[action] += 1
    return actions


def test_compaction_and_cleaning_keep_the_file_count_bounded(
    lake_factory: Callable[..., Lake],
) -> None:
    """10 small MOR commits: inline compaction every 2 delta commits and cleaning that keeps
    1 commit leave a bounded set of files, while the data stays exact."""
    lake = lake_factory(
        TIDELAKE_LAKE__TABLE_TYPE="MERGE_ON_READ",
        TIDELAKE_LAKE__TABLE_SERVICES__COMPACTION_DELTA_COMMITS=str(DELTA_COMMITS),
        TIDELAKE_LAKE__TABLE_SERVICES__CLEAN_RETAIN_COMMITS=str(RETAIN),
        # The metadata table is not what this test counts; without it commits are cheaper.
        TIDELAKE_LAKE__HUDI_OPTIONS='{"hoodie.metadata.enable": "false"}',
    )
    table_dir = Path(lake.path())
    seq = 0
    expected: dict[str, tuple[str]] = {}
    counts = []
    for n in range(COMMITS):
        events = []
        for key in range(1, 6):  # the same five keys, updated in every commit
            seq += 1
            status = f"s{n}"
            events.append(
                event("insert" if n == 0 else "update", key, seq, seq, values={"status": status})
            )
            expected[str(key)] = (status,)
        lake.stage(events)
        stats = lake.ingest()
        assert [1] == [stats.commits]
        counts.append(len(_data_files(table_dir)))

    actions = _completed_actions(table_dir)
    assert actions["commit"] >= COMMITS // DELTA_COMMITS - 1, actions  # compactions
    assert actions["clean"] >= 1, actions
    # Without compaction and cleaning each commit would add a file (10 in all); with them the
    # count stops growing: a few file slices of one file group, each a base file and at most
    # DELTA_COMMITS log files.
    bound = (RETAIN + 1) * (1 + DELTA_COMMITS)
    assert max(counts) <= bound, counts
    assert counts[-1] < COMMITS, counts
    print("file counts after each commit", counts, dict(actions))
    assert expected == lake.state()
    assert lake.rows() == lake.spark_rows()
