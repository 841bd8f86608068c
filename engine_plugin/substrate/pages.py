"""Arena pages and page groups: the bookkeeping behind :class:`Substrate`, no policy.

A page is one storage buffer of u32 words (STORAGE | COPY_SRC | COPY_DST) with a free list.
Atomic pages are separate pages (a kernel declares a page binding ``atomic<u32>`` or not, so
one page must never hold both kinds of run). A page group owns its pages and keeps a script
of the placements it made, in order, which the next play of the group replays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .allocator import FreeList

__all__ = ["Page", "PageGroup", "ScriptEntry"]


class Page:
    """One arena page: ``buffer`` (a GPUBuffer of ``words`` u32 words) and its free list.

    ``group`` is the key of the page group that owns it (None: the shared pool);
    ``dedicated``: made for one run larger than the substrate's page size.
    ``touched``: words below this were handed out at least once (above it, still zero).
    """

    __slots__ = ("index", "buffer", "words", "atomic", "group", "dedicated", "free", "runs", "touched")

    def __init__(self, index: int, buffer: Any, words: int, align: int, atomic: bool, group: Any, dedicated: bool):
        self.index = index
        self.buffer = buffer
        self.words = words
        self.atomic = atomic
        self.group = group
        self.dedicated = dedicated
        self.free = FreeList(words, align)
        self.runs = 0
        self.touched = 0

    def describe(self, label: str) -> str:
        kind = "atomic page" if self.atomic else "page"
        owner = f", group {self.group!r}" if self.group is not None else ""
        return f"{kind} {self.index} of substrate {label!r} ({self.words * 4} bytes{owner})"


@dataclass
class ScriptEntry:
    """One placement a page group made: the reservation's shape and where it went."""

    words: int
    atomic: bool
    page: int
    base: int


@dataclass(eq=False)
class PageGroup:
    """A page group: the pages it owns, in the order it made them, and its placement script.

    ``cursor`` counts the runs made in the current play; entering the group resets it.
    """

    key: Any
    pages: list[int] = field(default_factory=list)
    script: list[ScriptEntry] = field(default_factory=list)
    cursor: int = 0
    plays: int = 0
    replayed: int = 0  # placements of the current play that followed the script

    def __repr__(self) -> str:
        return f"PageGroup({self.key!r}, pages={self.pages}, plays={self.plays}, script={len(self.script)})"
