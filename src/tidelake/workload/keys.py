"""The live keys of one generated table, picked at random in O(1)."""

from __future__ import annotations

import random

from tidelake.workload.ticdc import Key


class LiveKeys:
    """Keys of the rows a table holds now: a list for random picks, plus each key's slot in
    it so a delete is a swap-remove instead of a scan."""

    def __init__(self) -> None:
        self._keys: list[Key] = []
        self._slot: dict[Key, int] = {}

    def add(self, key: Key) -> None:
        self._slot[key] = len(self._keys)
        self._keys.append(key)

    def remove(self, key: Key) -> None:
        i = self._slot.pop(key)
        last = self._keys.pop()
        if last != key:
            self._keys[i] = last
            self._slot[last] = i

    def choice(self, rng: random.Random) -> Key | None:
        """A live key drawn by ``rng``; None when the table is empty."""
        return rng.choice(self._keys) if self._keys else None

    def __len__(self) -> int:
        return len(self._keys)
