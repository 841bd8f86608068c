"""The page free list on its own (pure Python): aligned best fit, exact replays, coalescing."""

from __future__ import annotations

import random

import pytest

from engine_plugin.errors import PluginError
from engine_plugin.substrate.allocator import FreeList


def test_runs_are_aligned_and_best_fit_prefers_the_tightest_hole():
    fl = FreeList(64, 8)
    a, b, c = fl.alloc(16), fl.alloc(8), fl.alloc(24)
    assert (a, b, c) == (0, 16, 24)
    fl.free(a, 16)  # a 16-word hole at 0, a 16-word tail at 48
    fl.free(c, 24)  # merges with the tail: 40 words at 24
    assert fl.blocks == [(0, 16), (24, 40)]
    assert fl.alloc(16) == 0  # the exact hole, not the big tail
    assert fl.alloc(8) == 24
    fl.check()


def test_freeing_every_run_in_any_order_coalesces_back_to_one_block():
    rng = random.Random(7)
    fl = FreeList(8 * 100, 8)
    sizes = {}
    for _ in range(30):
        size = 8 * rng.randint(1, 3)
        sizes[fl.alloc(size)] = size
    order = list(sizes)
    rng.shuffle(order)
    for start in order:
        fl.free(start, sizes[start])
        fl.check()
    assert fl.blocks == [(0, 800)] and fl.empty


def test_take_at_claims_exactly_the_recorded_span_or_nothing():
    fl = FreeList(64, 8)
    assert fl.take_at(16, 16)
    assert fl.blocks == [(0, 16), (32, 32)]
    assert not fl.take_at(24, 8)  # taken
    assert not fl.take_at(60, 8)  # past the page
    assert not fl.take_at(4, 8)  # unaligned
    fl.free(16, 16)
    assert fl.blocks == [(0, 64)]


def test_random_churn_matches_a_word_map_model():
    rng = random.Random(1234)
    align, words = 4, 4 * 512
    fl = FreeList(words, align)
    used = [False] * words
    live: dict[int, int] = {}
    for step in range(3000):
        if live and (rng.random() < 0.45 or fl.free_words < 64):
            start = rng.choice(list(live))
            size = live.pop(start)
            fl.free(start, size)
            used[start : start + size] = [False] * size
        else:
            size = align * rng.randint(1, 24)
            start = fl.alloc(size)
            if start is None:
                # Refused only when no free block is large enough.
                assert fl.largest < size
                continue
            assert start % align == 0 and not any(used[start : start + size])
            used[start : start + size] = [True] * size
            live[start] = size
        if step % 100 == 0:
            fl.check()
            assert fl.free_words == used.count(False)
    fl.check()


def test_sizes_that_break_the_alignment_are_an_internal_bug_not_silent():
    fl = FreeList(64, 8)
    with pytest.raises(PluginError, match="engine_plugin bug"):
        fl.alloc(12)
    with pytest.raises(PluginError, match="overlaps a free block"):
        fl.free(0, 8)  # nothing allocated there
