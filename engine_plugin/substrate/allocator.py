"""A free list over one page's words: aligned blocks, best fit, coalescing on free. Pure Python.

Every size and offset the allocator sees is a multiple of its alignment (the substrate rounds
runs up), so every free block starts aligned and no run ever needs padding in front of it.
Free blocks are kept sorted by start; freeing merges a block with both neighbours, so a page
whose runs are all freed is one block again — the property page-group replays rely on.
"""

from __future__ import annotations

import bisect

from ..errors import bug

__all__ = ["FreeList"]


class FreeList:
    """Free blocks of a page of ``words`` words, every block a multiple of ``align`` words."""

    __slots__ = ("words", "align", "_starts", "_sizes", "free_words")

    def __init__(self, words: int, align: int):
        if words <= 0 or align <= 0 or words % align:
            raise bug(f"FreeList({words}, {align}): the page size must be a positive multiple of the alignment")
        self.words = words
        self.align = align
        self._starts: list[int] = [0]  # sorted starts of free blocks
        self._sizes: dict[int, int] = {0: words}
        self.free_words = words

    # -- queries ------------------------------------------------------------------------------
    @property
    def blocks(self) -> list[tuple[int, int]]:
        """The free blocks as (start, size), in address order."""
        return [(s, self._sizes[s]) for s in self._starts]

    @property
    def largest(self) -> int:
        return max(self._sizes.values(), default=0)

    @property
    def empty(self) -> bool:
        """Whether nothing is allocated (the page is one free block)."""
        return self.free_words == self.words

    # -- allocation ---------------------------------------------------------------------------
    def alloc(self, size: int) -> int | None:
        """The start of a ``size``-word run (best fit, lowest address on ties), or None."""
        self._check_size(size)
        best = None
        best_size = 0
        for start in self._starts:
            have = self._sizes[start]
            if have >= size and (best is None or have < best_size):
                best, best_size = start, have
                if have == size:
                    break
        if best is None:
            return None
        self._carve(best, best_size, best, size)
        return best

    def take_at(self, start: int, size: int) -> bool:
        """Take exactly ``[start, start + size)`` if it is free (a replayed placement)."""
        self._check_size(size)
        if start % self.align or start < 0 or start + size > self.words:
            return False
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return False
        block = self._starts[i]
        have = self._sizes[block]
        if block + have < start + size:
            return False
        self._carve(block, have, start, size)
        return True

    def free(self, start: int, size: int) -> None:
        """Give ``[start, start + size)`` back, merging it with free neighbours."""
        self._check_size(size)
        i = bisect.bisect_left(self._starts, start)
        prev_i = i - 1
        if prev_i >= 0 and self._starts[prev_i] + self._sizes[self._starts[prev_i]] > start:
            raise bug(f"free of words [{start}, {start + size}) overlaps a free block")
        if i < len(self._starts) and self._starts[i] < start + size:
            raise bug(f"free of words [{start}, {start + size}) overlaps a free block")
        self.free_words += size
        # Merge with the following block.
        if i < len(self._starts) and self._starts[i] == start + size:
            size += self._sizes.pop(self._starts[i])
            del self._starts[i]
        # Merge with the preceding block.
        if prev_i >= 0:
            p = self._starts[prev_i]
            if p + self._sizes[p] == start:
                self._sizes[p] += size
                return
        self._starts.insert(i, start)
        self._sizes[start] = size

    # -- internals ----------------------------------------------------------------------------
    def _check_size(self, size: int) -> None:
        if size <= 0 or size % self.align:
            raise bug(f"allocator size {size} is not a positive multiple of {self.align} words")

    def _carve(self, block: int, have: int, start: int, size: int) -> None:
        """Remove ``[start, start + size)`` from the free block ``[block, block + have)``."""
        i = bisect.bisect_left(self._starts, block)
        del self._starts[i]
        del self._sizes[block]
        if start > block:  # the part in front stays free
            self._starts.insert(i, block)
            self._sizes[block] = start - block
            i += 1
        end, block_end = start + size, block + have
        if block_end > end:  # and so does the part behind
            self._starts.insert(i, end)
            self._sizes[end] = block_end - end
        self.free_words -= size

    def check(self) -> None:
        """Raise if the free list is inconsistent (sorted, aligned, disjoint, not adjacent)."""
        total = 0
        prev_end = -1
        for s in self._starts:
            n = self._sizes[s]
            if s % self.align or n % self.align or n <= 0 or s < prev_end or s == prev_end or s + n > self.words:
                raise bug(f"free list broken at block ({s}, {n}): {self.blocks}")
            prev_end = s + n
            total += n
        if total != self.free_words or len(self._sizes) != len(self._starts):
            raise bug(f"free list counts {total} free words, bookkeeping says {self.free_words}")
