"""A frame's work-list columns read from the world's vectors (``ChunkIndex._vector_columns``)
are exactly what the per-chunk lookups answer, evicted and re-added chunks included; once the
world moved (another thread changed it mid-frame) the per-chunk lookups answer, with
UNKNOWN_VERSION for chunks first looked up after the move."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_plugin.engine.products import UNKNOWN_VERSION, ChunkIndex
from engine_plugin.world import World


def _per_chunk(world: World, keys: set[int]) -> tuple:
    index = ChunkIndex(world)
    index._vectors = False
    return index.sorted_columns(keys)


def _same(a: tuple, b: tuple) -> None:
    assert a[0] == b[0] and a[1] == b[1]
    for x, y in zip(a[2:], b[2:]):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def _apply(world: World, ops: list) -> None:
    """The ops a property test drew: adds (slots reused), evictions, edits of "h", dirty "m"."""
    for name, k in ops:
        if name == "add" and k not in world and len(world) < world.max_chunks:
            world.add(k)
        elif name == "evict" and k in world:
            world.evict(k)
        elif name == "edit" and k in world:
            world.write(k, "h", float(k))
        elif name == "dirty" and k in world:
            world.mark_dirty(k, "m")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "evict", "edit"]), st.integers(0, 40)), max_size=60), st.sets(st.integers(-3, 45), max_size=30))
def test_vector_columns_answer_what_per_chunk_lookups_answer(ops, owed):
    world = World((2, 2), {"h": np.float32}, max_chunks=48)
    for k in range(0, 40, 3):
        world.add(k)
    _apply(world, ops)
    index = ChunkIndex(world)
    assert index._vectors
    got = index.sorted_columns(owed)
    _same(got, _per_chunk(world, owed))
    assert all(k in world for k in got[0]) and list(got[2]) == sorted(got[2])


def test_a_moved_world_is_looked_up_chunk_by_chunk():
    world = World((2, 2), {"h": np.float32}, max_chunks=8)
    for k in range(6):
        world.add(k)
    index = ChunkIndex(world)
    first = index.get(1)  # looked up before the move: its version stands
    world.write(2, "h", 5.0)  # another thread's change after the index was made
    keys, versions, slots, _ = index.sorted_columns({1, 2, 3})
    assert keys == (1, 2, 3)
    assert versions[0] == first[1] and versions[1] == UNKNOWN_VERSION and versions[2] == UNKNOWN_VERSION


def test_chunks_learned_from_the_uploads_keep_their_versions_after_the_world_moved():
    world = World((2, 2), {"h": np.float32}, max_chunks=8)
    for k in range(6):
        world.add(k)
    index = ChunkIndex(world)
    slots = np.array([world.slot(k) for k in (1, 2)], dtype=np.int64)
    versions = world.slot_versions(slots)
    index.learn([1, 2], slots, versions)  # what the upload's take read (the mirrors hold it)
    world.write(1, "h", 5.0)  # another thread's change after the index was made
    keys, got, _, _ = index.sorted_columns({1, 2, 3})
    assert keys == (1, 2, 3)
    assert got == (int(versions[0]), int(versions[1]), UNKNOWN_VERSION)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["add", "evict", "edit", "dirty"]), st.integers(0, 40)), max_size=60),
    st.sets(st.integers(-3, 45), max_size=30),
    st.booleans(),
)
def test_columns_of_an_upload_take_answer_what_per_chunk_lookups_answer(ops, extra, owe_the_take):
    # The frame's common case: a product owes exactly what one field's take found changed,
    # answered from the take's own vectors; any other owed set from the world's.
    from engine_plugin.gpu.descriptors import take_dirty_changes

    world = World((2, 2), {"h": np.float32, "m": np.float32}, max_chunks=48)
    for k in range(0, 40, 3):
        world.add(k)
    world.take_dirty()
    _apply(world, ops)
    index = ChunkIndex(world)
    for field in ("h", "m"):
        found = take_dirty_changes(world, field, 2, meta=index.get)
        if found.versions is not None and len(found.keys):
            index.learn(found.keys, found.slots, found.versions)
    taken = {int(k) for k in index._takes[0][0]} if index._takes else set()
    owed = taken if owe_the_take else taken | extra
    got = index.sorted_columns(owed)
    _same(got, _per_chunk(world, owed))
    assert index.sorted_columns(set(owed)) is got  # made once a frame


def test_a_take_answers_no_columns_once_the_world_moved():
    world = World((2, 2), {"h": np.float32}, max_chunks=8)
    for k in range(6):
        world.add(k)
    index = ChunkIndex(world)
    world.write(2, "h", 5.0)
    from engine_plugin.gpu.descriptors import take_dirty_changes

    found = take_dirty_changes(world, "h", 0)
    index._takes.append((found.keys, found.slots, found.versions, []))  # (learn() keeps none after a move)
    assert index._taken_columns(frozenset(found.keys)) is None
