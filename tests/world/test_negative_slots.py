"""A negative slot (``slots_of``'s -1 for a key not in the world) is refused by the world's
slot-vector lookups: numpy read it as the last slot and answered another chunk's version or
key (review helper 221)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin.world import World
from engine_plugin.world.errors import WorldError


def _world() -> World:
    world = World((2, 2), {"h": np.float32}, max_chunks=4)
    for k in (10, 20, 30, 40):  # every slot taken: the last one holds chunk 40
        world.add(k)
    return world


@pytest.mark.parametrize("slots", [[-1], np.array([0, -1]), np.array([-1], dtype=np.int32), -1])
def test_a_negative_slot_is_refused_not_read_as_the_last(slots):
    world = _world()
    with pytest.raises(WorldError, match="-1 is no slot"):
        world.slot_versions(slots)
    with pytest.raises(WorldError, match="-1 is no slot"):
        world.key_vector(slots)
    if not np.isscalar(slots):
        with pytest.raises(WorldError, match="-1 is no slot"):
            world.keys_at(slots)


def test_a_missing_key_s_slot_is_refused_where_it_answered_another_chunk_s_version():
    world = _world()
    slots = world.slots_of([20, 99])
    assert slots.tolist() == [world.slot(20), -1]
    with pytest.raises(WorldError):
        world.slot_versions(slots)


def test_valid_slots_of_every_form_still_answer():
    world = _world()
    want = [world.version(k) for k in (10, 20, 30, 40)]
    assert world.slot_versions(np.arange(4)).tolist() == want
    assert world.slot_versions(np.arange(4, dtype=np.uint32)).tolist() == want
    assert world.slot_versions([3, 0]).tolist() == [want[3], want[0]]
    assert world.slot_versions(slice(1, 3)).tolist() == want[1:3]
    assert world.slot_versions([]).tolist() == []
    assert int(world.slot_versions(2)) == want[2]
    assert world.keys_at([3, 1]) == [40, 20] and world.key_vector(np.array([0, 3])).tolist() == [10, 40]


def test_a_bool_is_no_chunk_key_for_slots_of_either():
    # Review helper 236: slots_of([True, False]) answered chunks 1 and 0's slots, where every
    # other lookup treats a bool as no chunk key.
    world = World((2, 2), {"h": np.float32}, max_chunks=4)
    world.add(0)
    world.add(1)
    assert world.slots_of([True, False, np.bool_(True), 1, 7]).tolist() == [-1, -1, -1, world.slot(1), -1]
    assert world.slots_of((0, 1)).tolist() == [world.slot(0), world.slot(1)]


@pytest.mark.parametrize("slots", [[5], [0, 4], np.array([9]), [True]])
def test_a_slot_past_the_world_is_a_world_error(slots):
    # Review helper 236: a raw IndexError.
    world = _world()
    with pytest.raises(WorldError, match="do not index this world's 4 slots"):
        world.slot_versions(slots)
    if not (isinstance(slots, list) and slots == [True]):
        with pytest.raises(WorldError, match="do not index this world's 4 slots"):
            world.keys_at(slots)
