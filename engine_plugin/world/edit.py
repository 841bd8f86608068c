"""The mapping an editing context hands out: ``with world.edit(key) as fields: ...``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from .errors import WorldError

if TYPE_CHECKING:  # only for hints; world.py imports this module
    from .world import World

__all__ = ["ChunkEdit"]


class ChunkEdit(Mapping[str, np.ndarray]):
    """Field name -> a writeable copy of that field of one chunk, committed when the edit ends.

    Only the fields taken (``edit[name]``) are copied, committed and marked dirty. After the
    edit ends the copies turn read-only, so a late write fails instead of being lost silently.
    """

    def __init__(self, world: World, key: int, slot: int):
        self._world = world
        self.key = key
        self.slot = slot
        self._taken: dict[str, np.ndarray] = {}
        self._open = True

    def __getitem__(self, name: str) -> np.ndarray:
        if not self._open:
            raise WorldError(f"the edit of chunk {self.key} has ended; open a new world.edit({self.key})")
        arr = self._taken.get(name)
        if arr is None:
            arr = self._taken[name] = self._world._edit_field(self.slot, name)
        return arr

    def __iter__(self) -> Iterator[str]:
        return iter(spec.name for spec in self._world.fields)

    def __len__(self) -> int:
        return len(self._world.fields)

    @property
    def taken(self) -> tuple[str, ...]:
        """The fields taken so far (these will be committed)."""
        return tuple(self._taken)

    def _close(self) -> dict[str, np.ndarray]:
        self._open = False
        for arr in self._taken.values():
            arr.flags.writeable = False
        return self._taken
