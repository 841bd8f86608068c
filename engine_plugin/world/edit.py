"""The mapping an editing context hands out: ``with world.edit(key) as fields: ...``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from .errors import UnknownFieldError, WorldError

if TYPE_CHECKING:  # only for hints; world.py imports this module
    from .world import World

__all__ = ["ChunkEdit"]


class ChunkEdit(Mapping[str, np.ndarray]):
    """Field name -> a writeable copy of that field of one chunk, committed when the edit ends.

    Only the fields taken (``edit[name]``) are copied, committed and marked dirty. After the
    edit ends the copies turn read-only, so a late write fails instead of being lost silently.
    The copies are of the field's own dtype, so values stored into them follow numpy's rules
    (an int64 array of 300 into a u8 field wraps): :meth:`World.write` checks values, an edit
    cannot. ``in`` and ``get`` of an unknown name take nothing (``get`` of a field takes it).
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
            if name not in self:  # a KeyError too, as a mapping's: Mapping.get and `in` rely on it
                fields = self._world.fields
                raise UnknownFieldError(f"unknown field {name!r}; this world declares {', '.join(repr(spec.name) for spec in fields)}")
            arr = self._taken[name] = self._world._edit_field(self.slot, name)
        return arr

    def __contains__(self, name: object) -> bool:
        # A question, not a take: Mapping's `in` took the field, which the edit then committed
        # (a new version, a dirty flag) though nothing was written (review helper 221).
        return isinstance(name, str) and any(spec.name == name for spec in self._world.fields)

    def __eq__(self, other: object) -> bool:
        return self is other  # (Mapping's would take, and so commit, every field)

    __hash__ = object.__hash__

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
