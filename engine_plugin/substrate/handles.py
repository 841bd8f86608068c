"""Run handles, placements, and the substrate's own errors.

A :class:`RunHandle` is a frozen (slot, generation) pair plus what the run was made as; a
freed slot comes back with generation + 1, so an old handle can never reach a new run: using
it raises :class:`StaleRunError` naming the run it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import PageBindingError, PluginError, StaleHandleError
from ..lowering.types import ValueType, parse_value_type

if TYPE_CHECKING:
    from .substrate import Substrate

__all__ = ["Placement", "RunHandle", "StaleColumnError", "StaleRunError", "SubstrateError"]


class SubstrateError(PluginError, ValueError):
    """A substrate call's arguments are wrong (element, count, size, data shape, group use)."""


class StaleRunError(StaleHandleError):
    """A run handle was used after its run was freed (or its substrate closed)."""


class StaleColumnError(PageBindingError, StaleRunError):
    """A freed run handed to a kernel's column: at the column's binding line, and a
    :class:`StaleRunError` as every other use of a freed handle (review helper 209: a plain
    PageBindingError escaped ``except StaleRunError``)."""


class Placement(NamedTuple):
    """Where a run stands: its page buffer, the word it starts at, its length in elements."""

    page: Any
    base_word: int
    length: int


@dataclass(frozen=True)
class RunHandle:
    """A run of elements in a substrate page. Frozen and hashable; valid until freed.

    ``page`` is the page's index in its substrate, ``base`` the word the run starts at,
    ``length`` its elements; ``element`` is the WGSL type (``vec3<f32>``), stored flat.
    """

    substrate: "Substrate" = field(repr=False)
    slot: int
    generation: int
    page: int
    base: int
    length: int
    element: str
    atomic: bool = False
    name: str | None = None
    group: Any = None

    @property
    def value_type(self) -> ValueType:
        vt = parse_value_type(self.element)
        assert vt is not None  # checked at alloc
        return vt

    @property
    def lanes(self) -> int:
        return self.value_type.lanes

    @property
    def scalar(self) -> str:
        return self.value_type.scalar

    @property
    def words(self) -> int:
        """Words the run's elements occupy (its reservation may be larger, for alignment)."""
        return self.length * self.value_type.lanes

    @property
    def nbytes(self) -> int:
        return self.words * 4

    @property
    def live(self) -> bool:
        return self.substrate.is_live(self)

    def describe(self) -> str:
        """``run 'pos' (vec3<f32> x 100, page 2 @ word 64)`` — for messages."""
        label = f"run {self.name!r}" if self.name else f"run #{self.slot}.{self.generation}"
        kind = " atomic" if self.atomic else ""
        return f"{label} ({self.element} x {self.length},{kind} page {self.page} @ word {self.base} of substrate {self.substrate.label!r})"

    # -- conveniences over the substrate ------------------------------------------------------
    def placement(self) -> Placement:
        """``(page GPUBuffer, base_word, length)``; raises StaleRunError once freed."""
        return self.substrate.placement(self)

    def write(self, values: Any, start: int = 0) -> None:
        """Upload ``values`` into the run from element ``start`` (see :meth:`Substrate.write`)."""
        self.substrate.write(self, values, start)

    def read_back(self, as_u32: bool = False) -> np.ndarray:
        """The run's elements, (length,) or (length, lanes); waits for the GPU."""
        return self.substrate.read(self, as_u32=as_u32)

    def binding_resource(self) -> dict[str, Any]:
        """A wgpu buffer binding of this run alone (its base is storage-offset aligned)."""
        page, base, _ = self.placement()
        return {"buffer": page, "offset": base * 4, "size": max(self.nbytes, 4)}

    def free(self) -> None:
        self.substrate.free(self)
