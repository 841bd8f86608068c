"""Generation-checked product handles (wgpu-core style: a slot index plus a generation).

A backend keeps its products in a bounded :class:`SlotTable`. Every registration takes a new
generation from one process-wide counter, so a handle never comes back to life: not after
``unregister``, not when its slot is reused by another product, and not on another backend.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["GpuProductHandle", "SlotTable"]

T = TypeVar("T")

_generations = itertools.count(1)
_generations_lock = threading.Lock()


def _next_generation() -> int:
    with _generations_lock:
        return next(_generations)


@dataclass(frozen=True)
class GpuProductHandle:
    """A caller's product key combined with the backend generation it was registered under."""

    key: Hashable
    generation: int

    def __str__(self) -> str:
        return f"product {self.key!r} (generation {self.generation})"


@dataclass
class _Slot(Generic[T]):
    generation: int = 0
    key: Hashable = None
    value: T | None = None


class SlotTable(Generic[T]):
    """At most ``capacity`` live entries keyed by caller keys, looked up by handle.

    Freed slots are reused lowest first; a lookup with a stale handle answers None.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._slots: list[_Slot[T]] = []
        self._by_key: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def insert(self, key: Hashable, value: T) -> GpuProductHandle | None:
        """Store ``value`` under ``key``; None when the key is live already or the table is full."""
        if key in self._by_key:
            return None
        index = next((i for i, s in enumerate(self._slots) if s.value is None), None)
        if index is None:
            if len(self._slots) >= self.capacity:
                return None
            index = len(self._slots)
            self._slots.append(_Slot())
        slot = self._slots[index]
        slot.generation, slot.key, slot.value = _next_generation(), key, value
        self._by_key[key] = index
        return GpuProductHandle(key, slot.generation)

    def get(self, handle: GpuProductHandle) -> T | None:
        """The live value of ``handle``, or None when the handle is stale or foreign."""
        index = self._by_key.get(handle.key)
        if index is None:
            return None
        slot = self._slots[index]
        return slot.value if slot.generation == handle.generation else None

    def slot_of(self, handle: GpuProductHandle) -> int | None:
        """The slot index of a live handle (diagnostics and tests of slot reuse)."""
        return self._by_key.get(handle.key) if self.get(handle) is not None else None

    def remove(self, handle: GpuProductHandle) -> T | None:
        """Free the slot of a live handle and answer its value; None when stale."""
        value = self.get(handle)
        if value is None:
            return None
        index = self._by_key.pop(handle.key)
        slot = self._slots[index]
        slot.key, slot.value = None, None
        return value

    def handles(self) -> Iterator[GpuProductHandle]:
        for s in self._slots:
            if s.value is not None:
                yield GpuProductHandle(s.key, s.generation)

    def clear(self) -> list[T]:
        values = [s.value for s in self._slots if s.value is not None]
        for s in self._slots:
            s.key, s.value = None, None
        self._by_key.clear()
        return values
