"""Manifest names and their incremental listing (stage/manifest.py)."""

from __future__ import annotations

from pathlib import Path

from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import (
    Manifest,
    ManifestListing,
    list_manifests,
    manifest_range,
    write_manifest,
)


class CountingStorage(LocalStorage):
    """A real local storage that records what each listing asked for and returned."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listings: list[tuple[str, list[str]]] = []

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        out = super().list(prefix, start_after)
        self.listings.append((start_after, out))
        return out


def _manifest(first: int, last: int, batch_id: str) -> Manifest:
    return Manifest(batch_id=batch_id, seq_first=first, seq_last=last, created_at_ms=0, tables=())


def test_names_sort_by_last_sequence_and_read_back_either_order() -> None:
    """New names lead with the last sequence; a name of the older first-last order reads alike."""
    name = _manifest(11, 25, "b").name
    assert "manifests/00000000000000000025-00000000000000000011-b.json" == name
    assert (11, 25) == manifest_range(name)
    assert (11, 25) == manifest_range("manifests/00000000000000000011-00000000000000000025-a.json")
    assert manifest_range("manifests/notes.txt") is None


def test_listing_after_the_first_asks_only_for_new_names(tmp_path: Path) -> None:
    """The first call lists the whole prefix; later calls start after the highest name seen,
    and what the cursor passed is forgotten."""
    storage = CountingStorage(tmp_path)
    for first, last, bid in [(1, 10, "a"), (11, 20, "b")]:
        write_manifest(storage, _manifest(first, last, bid))
    listing = ManifestListing(storage)
    assert [_manifest(1, 10, "a").name, _manifest(11, 20, "b").name] == listing.after(0)
    write_manifest(storage, _manifest(21, 30, "c"))
    assert [_manifest(11, 20, "b").name, _manifest(21, 30, "c").name] == listing.after(10)
    assert [("", 2), (_manifest(11, 20, "b").name, 1)] == [
        (start, len(out)) for start, out in storage.listings
    ]


def test_a_restaged_batch_that_runs_past_the_listed_ones_is_found(tmp_path: Path) -> None:
    """A restage from an old ack floor ([5..30] after [11..20] was listed) ends later, so its
    name sorts after every listed one: its new events (21..30) are not missed."""
    storage = LocalStorage(tmp_path)
    write_manifest(storage, _manifest(1, 10, "a"))
    write_manifest(storage, _manifest(11, 20, "b"))
    listing = ManifestListing(storage)
    listing.after(0)
    write_manifest(storage, _manifest(5, 30, "b2"))
    # Stream order is by first sequence, as for a whole listing.
    assert [_manifest(5, 30, "b2").name, _manifest(11, 20, "b").name] == listing.after(10)
    assert listing.after(10) == list_manifests(storage, after_seq=10)


def test_older_names_are_all_found_by_the_first_listing(tmp_path: Path) -> None:
    """Staging written with first-last names: the whole first listing finds them in order."""
    storage = LocalStorage(tmp_path)
    for first, last in [(1, 10), (11, 20), (5, 30)]:
        storage.put(f"manifests/{first:020d}-{last:020d}-x{first}.json", b"{}")
    listing = ManifestListing(storage)
    expected = [
        "manifests/00000000000000000001-00000000000000000010-x1.json",
        "manifests/00000000000000000005-00000000000000000030-x5.json",
        "manifests/00000000000000000011-00000000000000000020-x11.json",
    ]
    assert expected == listing.after(0)


def test_rewind_lists_the_whole_prefix_again(tmp_path: Path) -> None:
    """A cursor moved back (a resumed table) needs manifests the listing already forgot."""
    storage = CountingStorage(tmp_path)
    write_manifest(storage, _manifest(1, 10, "a"))
    write_manifest(storage, _manifest(11, 20, "b"))
    listing = ManifestListing(storage)
    assert [_manifest(11, 20, "b").name] == listing.after(10)
    listing.rewind()
    assert [_manifest(1, 10, "a").name, _manifest(11, 20, "b").name] == listing.after(0)
    assert ["", ""] == [start for start, _ in storage.listings]
