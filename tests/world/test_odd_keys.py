"""A key that is no chunk key (unhashable, a bool) is no live chunk to every lookup: a clear
UnknownChunkError (a WorldError and a KeyError), never a raw TypeError, and never chunk 1
(``write(True, ...)`` changed chunk 1, which ``add(True)`` refuses) (review helper 221)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin.world import World
from engine_plugin.world.errors import UnknownChunkError, WorldError

ODD = [[1], {}, True, np.True_, False]


def _world() -> World:
    world = World((2, 2), {"h": np.float32}, max_chunks=4)
    world.add(0, {"h": 5.0})
    world.add(1, {"h": 7.0})
    world.take_dirty()
    return world


@pytest.mark.parametrize("key", ODD, ids=repr)
def test_an_odd_key_is_no_live_chunk_and_changes_nothing(key):
    world = _world()
    versions = {k: world.version(k) for k in world.keys()}
    calls = [
        lambda: world.write(key, "h", 1.0),
        lambda: world.set_tile(key, "h", (0, 0), 1.0),
        lambda: world.read(key, "h"),
        lambda: world.version(key),
        lambda: world.slot(key),
        lambda: world.evict(key),
        lambda: world.mark_dirty(key),
        lambda: world.edit(key).__enter__(),
    ]
    for call in calls:
        with pytest.raises(UnknownChunkError) as raised:
            call()
        assert isinstance(raised.value, WorldError) and isinstance(raised.value, KeyError)
    assert key not in world and not world.is_current(key, versions[1]) and not world.is_dirty(key, "h")
    assert {k: world.version(k) for k in world.keys()} == versions  # nothing changed
    np.testing.assert_array_equal(world.read(1, "h"), 7.0)
    assert world.take_dirty() == []


def test_int_like_keys_still_name_their_chunk():
    world = _world()
    assert world.version(np.int64(1)) == world.version(1) and 1 in world and np.int32(1) in world
