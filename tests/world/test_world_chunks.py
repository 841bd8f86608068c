"""The chunked world: declarations, slots, versions, read-only views, edits, dirty tracking."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin.errors import PluginError
from engine_plugin.world import ChunkBusyError, UnknownChunkError, World, WorldError, WorldFullError


def make(max_chunks: int = 4) -> World:
    return World((4, 4), {"h": np.float32, "solid": bool, "id": np.uint16}, max_chunks=max_chunks)


# ---- declarations -----------------------------------------------------------------------


def test_fields_are_declared_once_in_order_with_their_gpu_formats():
    w = make()
    assert [(f.name, f.index, f.format.name, f.value_bytes) for f in w.fields] == [
        ("h", 0, "F32", 4), ("solid", 1, "U8", 1), ("id", 2, "U16", 2)]
    assert w.field("solid").dtype == np.dtype(bool) and w.chunk_nbytes("id") == 32


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, object, "U3"])
def test_declaring_a_field_no_gpu_mirror_can_store_is_a_type_error(dtype):
    with pytest.raises(TypeError, match="float32"):
        World((4, 4), {"bad": dtype})


@pytest.mark.parametrize("shape", [(), (0, 4), (1, 2, 3, 4), (4.0, 4), "32x32", (True, 4)])
def test_bad_chunk_shapes_are_refused_with_an_example(shape):
    with pytest.raises(WorldError, match=r"e\.g\. \(32, 32\)"):
        World(shape, {"h": np.float32})


def test_a_world_too_big_to_allocate_is_a_world_error_naming_its_field():
    # Review helper 194: numpy's "array is too big" (ValueError) or a MemoryError came out raw.
    with pytest.raises(WorldError, match=r"field 'h' of 1073741824 chunks of 1048576x1048576 tiles needs [\d,]+ bytes"):
        World((2**20, 2**20), {"h": np.float32}, max_chunks=2**30)
    with pytest.raises(WorldError, match="needs 73,786,976,294,838,206,464 bytes"):  # numpy's product wrapped to 0 (review helper 198)
        World((2**32, 2**32), {"h": np.float32}, max_chunks=1)


def test_bad_field_declarations_and_capacities_are_refused():
    with pytest.raises(WorldError):
        World((4, 4), {})
    with pytest.raises(WorldError):
        World((4, 4), {"": np.float32})
    with pytest.raises(WorldError):
        World((4, 4), {"h": np.float32}, max_chunks=0)


def test_every_world_error_is_a_plugin_error_and_unknown_chunks_are_key_errors():
    w = make()
    with pytest.raises(KeyError) as info:
        w.read(99, "h")
    assert isinstance(info.value, (PluginError, UnknownChunkError))
    with pytest.raises(WorldError, match="'nope'.*'h', 'solid', 'id'"):
        w.field("nope")


# ---- chunks and slots -------------------------------------------------------------------


def test_each_live_chunk_keeps_a_stable_slot_and_evicted_slots_are_reused_lowest_first():
    w = make()
    assert [w.add(k) for k in (10, 11, 12, 13)] == [0, 1, 2, 3]
    with pytest.raises(WorldFullError):
        w.add(14)
    assert w.evict(12) == 2 and w.evict(10) == 0
    assert w.add(20) == 0 and w.add(21) == 2
    assert w.slot(11) == 1 and w.slot(13) == 3 and w.key_at(2) == 21 and len(w) == 4
    assert w.keys() == [11, 13, 20, 21] and 20 in w and 10 not in w


def test_a_reused_slot_starts_from_zeros_not_from_the_evicted_chunks_data():
    w = make(max_chunks=1)
    w.add(1, {"h": 5.0, "id": 7})
    w.evict(1)
    w.add(2)
    assert (w.read(2, "h") == 0).all() and (w.read(2, "id") == 0).all()


def test_adding_a_live_key_or_a_non_int_key_is_refused():
    w = make()
    w.add(1)
    with pytest.raises(WorldError, match="already"):
        w.add(1)
    with pytest.raises(WorldError, match="ints"):
        w.add("1")


# ---- versions ---------------------------------------------------------------------------


def test_every_mutation_path_gives_the_chunk_a_new_larger_version():
    w = make()
    w.add(1)
    w.add(2)
    seen = [w.version(1)]
    seen.append(w.write(1, "h", 1.0))
    seen.append(w.set_tile(1, "solid", (2, 3), True))
    with w.edit(1) as f:
        f["id"][0, 0] = 9
    seen.append(w.version(1))
    assert seen == sorted(set(seen)) and w.version(1) == w.clock
    other = w.version(2)
    w.write(1, "h", 2.0)
    assert w.version(2) == other  # another chunk's mutation leaves it alone


def test_reading_and_dirty_bookkeeping_do_not_change_versions():
    w = make()
    w.add(1)
    v = w.version(1)
    w.read(1, "h")
    w.dirty()
    w.take_dirty()
    w.mark_dirty(1)
    with w.edit(1):
        pass  # an edit that takes no field changes nothing
    assert w.version(1) == v


def test_a_key_evicted_and_added_again_never_repeats_a_version():
    w = make()
    w.add(1)
    old = w.version(1)
    w.evict(1)
    assert not w.is_current(1, old)
    w.add(1)
    assert w.version(1) > old and not w.is_current(1, old)


# ---- read-only views --------------------------------------------------------------------


def test_readers_get_live_views_that_cannot_be_written_or_made_writeable():
    w = make()
    w.add(1)
    view = w.read(1, "h")
    for arr in (view, w.mirror("h"), w.slab("h", 0, 2)):
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 1
        with pytest.raises(ValueError):
            arr.flags.writeable = True
    w.set_tile(1, "h", (0, 1), 3.0)
    assert view[0, 1] == 3.0  # live: later mutations show through


def test_the_mirror_is_dense_and_chunk_slot_major():
    w = make()
    w.add(7, {"id": 1})
    w.add(8, {"id": 2})
    m = w.mirror("id")
    assert m.shape == (4, 4, 4) and m.flags.c_contiguous
    assert (m[w.slot(8)] == 2).all() and m[0].ctypes.data + 32 == m[1].ctypes.data


# ---- writes and casting -----------------------------------------------------------------


def test_writes_broadcast_and_refuse_shapes_floats_into_ints_and_out_of_range_ints():
    w = make()
    w.add(1)
    w.write(1, "h", np.arange(4, dtype=np.float64))  # broadcasts over rows, f64 -> f32
    assert w.read(1, "h")[3].tolist() == [0, 1, 2, 3]
    with pytest.raises(WorldError, match="shape"):
        w.write(1, "h", np.zeros((3, 3)))
    with pytest.raises(WorldError, match="round"):
        w.write(1, "id", 1.5)
    with pytest.raises(WorldError, match="0..65535"):
        w.write(1, "id", 70_000)
    with pytest.raises(WorldError):
        w.set_tile(1, "solid", (0, 0), 2)
    w.set_tile(1, "solid", (0, 0), 1)
    assert w.read(1, "solid")[0, 0]


@pytest.mark.parametrize("tile", [(4, 0), (0, -1), (1,), (1, 2, 3), (1.0, 2)])
def test_tiles_outside_the_chunk_are_refused(tile):
    w = make()
    w.add(1)
    with pytest.raises(WorldError, match="outside"):
        w.set_tile(1, "h", tile, 1.0)


# ---- edits ------------------------------------------------------------------------------


def test_an_edit_commits_the_fields_it_took_once_on_exit():
    w = make()
    w.add(1)
    w.take_dirty()
    v = w.version(1)
    with w.edit(1) as f:
        f["h"][3, 3] = 1.0
        f["h"][0, 0] = 2.0
        assert w.read(1, "h")[0, 0] == 0.0  # not visible before commit
        assert w.version(1) == v
    assert w.read(1, "h")[3, 3] == 1.0 and w.read(1, "h")[0, 0] == 2.0
    assert w.version(1) == v + 1 and w.dirty() == [(1, "h")]
    assert set(f) == {"h", "solid", "id"} and f.taken == ("h",)


def test_an_edit_that_raises_is_discarded():
    w = make()
    w.add(1)
    v = w.version(1)
    with pytest.raises(RuntimeError):
        with w.edit(1) as f:
            f["h"][:] = 5.0
            raise RuntimeError("gameplay bug")
    assert (w.read(1, "h") == 0).all() and w.version(1) == v


def test_edited_arrays_are_read_only_after_the_edit_and_the_edit_cannot_be_reused():
    w = make()
    w.add(1)
    with w.edit(1) as f:
        arr = f["h"]
    with pytest.raises(ValueError):
        arr[0, 0] = 1.0
    with pytest.raises(WorldError, match="has ended"):
        f["h"]


def test_other_mutations_of_a_chunk_under_edit_are_refused():
    w = make()
    w.add(1)
    w.add(2)
    with w.edit(1):
        for call in (lambda: w.write(1, "h", 1.0), lambda: w.set_tile(1, "h", (0, 0), 1.0),
                     lambda: w.evict(1), lambda: w.edit(1).__enter__()):
            with pytest.raises(ChunkBusyError):
                call()
        w.write(2, "h", 1.0)  # other chunks are free


# ---- dirty tracking ---------------------------------------------------------------------


def test_dirty_tracking_is_per_chunk_and_field_and_ordered_by_field_then_slot():
    w = make()
    w.add(5)
    w.add(6)
    assert w.dirty() == [(5, "h"), (6, "h"), (5, "solid"), (6, "solid"), (5, "id"), (6, "id")]
    assert w.take_dirty("solid") == [(5, "solid"), (6, "solid")]
    assert w.take_dirty() and w.dirty() == []
    w.set_tile(6, "id", (0, 0), 3)
    w.write(5, "h", 1.0)
    assert w.dirty() == [(5, "h"), (6, "id")] and w.is_dirty(6, "id") and not w.is_dirty(6, "h")
    w.evict(6)
    assert w.dirty() == [(5, "h")]
    w.take_dirty()
    w.mark_dirty(name="solid")
    assert w.dirty() == [(5, "solid")]


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_world_is_a_whole_independent_world(how):
    # A copy's writes must show in its own reads (its writeable alias a view of its own data),
    # leave the original alone, and keep versions, dirty flags and slots; it has its own lock.
    import copy
    import pickle

    world = World((4, 4), {"h": "float32", "m": "uint8"}, max_chunks=4)
    world.add(1)
    world.write(1, "h", 2.0)
    world.take_dirty()
    world.write(1, "m", 5)
    twin = copy.deepcopy(world) if how == "deepcopy" else pickle.loads(pickle.dumps(world))
    assert twin.version(1) == world.version(1) and twin.dirty() == world.dirty() == [(1, "m")]
    assert twin.lock is not world.lock
    version = twin.write(1, "h", 3.0)
    assert version > world.version(1)
    assert twin.read(1, "h")[0, 0] == 3.0 and world.read(1, "h")[0, 0] == 2.0
    assert np.array_equal(twin.mirror("h")[twin.slot(1)], np.full((4, 4), 3.0, np.float32))
    assert twin.add(2) == 1 and 2 not in world
    with pytest.raises(ValueError):
        twin.mirror("h")[0, 0, 0] = 1.0  # still read-only from outside


def test_an_edit_whose_commit_is_interrupted_leaves_its_chunk_free():
    # Ctrl-C while the commit waits for the world's lock (a frame on another thread holds
    # it): the edit is dropped, as when its block raises, and the chunk is not left busy.
    world = World((4, 4), {"h": "float32"}, max_chunks=4)
    world.add(1)
    real = world.lock

    class InterruptedSecondTime:
        entered = 0

        def __enter__(self):
            self.entered += 1
            if self.entered == 2:  # the edit's commit
                raise KeyboardInterrupt
            return real.__enter__()

        def __exit__(self, *exc):
            return real.__exit__(*exc)

    world.lock = InterruptedSecondTime()  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        with world.edit(1) as f:
            f["h"][...] = 3.0
    world.lock = real
    assert world.read(1, "h")[0, 0] == 0.0  # not committed
    world.write(1, "h", 2.0)  # not busy
    assert world.read(1, "h")[0, 0] == 2.0


def test_a_second_dirty_consumer_sees_every_change_the_first_took_and_copies_carry_none():
    import copy
    import pickle

    world = World((2, 2), {"h": np.float32}, max_chunks=4)
    world.add(1)

    class Owner:  # what claims flags: an engine
        pass

    first, second = Owner(), Owner()
    assert world.claim_dirty(first) is None  # the world's own flags
    token = world.claim_dirty(second)
    assert token is not None
    assert world.take_dirty("h") == [(1, "h")]
    assert world.dirty("h", consumer=token) == [(1, "h")]  # not hidden by the first's take
    world.write(1, "h", 2.0)
    world.add(3)
    assert sorted(world.take_dirty_slots("h", consumer=token).tolist()) == sorted([world.slot(1), world.slot(3)])
    assert world.dirty("h") == [(1, "h"), (3, "h")] and world.dirty("h", consumer=token) == []
    for clone in (copy.deepcopy(world), pickle.loads(pickle.dumps(world))):
        assert clone.claim_dirty(Owner()) is None and clone.dirty("h") == [(1, "h"), (3, "h")]
    world.release_dirty(second, token)
    with pytest.raises(WorldError):
        world.dirty("h", consumer=token)
    del first
    import gc

    gc.collect()
    assert world.claim_dirty(Owner()) is None  # the first owner is gone: its flags are free again


def test_a_finite_value_past_a_float_fields_range_is_refused_not_stored_as_inf():
    # Review helper 41: write() of 1e39 into an f32 field stored inf (only a numpy warning).
    world = World((2,), {"f32": np.float32}, max_chunks=1)
    world.add(0)
    with pytest.raises(WorldError, match="f32"):
        world.write(0, "f32", np.float64(1e39))
    with pytest.raises(WorldError):
        world.set_tile(0, "f32", (1,), -1e300)
    world.write(0, "f32", np.array([np.inf, 3.5]))  # inf itself is a value the field holds
    assert world.read(0, "f32").tolist() == [np.inf, 3.5]


def test_a_bool_array_holding_other_bytes_is_stored_as_0_and_1():
    # np.frombuffer over saved bytes makes bools of 2 or 255: stored as they were, the mirror
    # (and any kernel unpacking it) saw them (review helper 67).
    world = World((2, 2), {"b": np.bool_}, max_chunks=2)
    world.add(0)
    world.write(0, "b", np.frombuffer(bytes([0, 2, 255, 1]), np.bool_).reshape(2, 2))
    assert world.mirror("b").view(np.uint8).reshape(2, -1)[world.slot(0)][:4].tolist() == [0, 1, 1, 1]

    with world.edit(0) as f:  # an edit's copy too
        np.copyto(f["b"], np.frombuffer(bytes([7, 0, 3, 9]), np.bool_).reshape(2, 2))
    assert world.mirror("b").view(np.uint8).reshape(2, -1)[world.slot(0)][:4].tolist() == [1, 0, 1, 1]


def test_an_edits_membership_test_and_get_take_nothing_and_bump_nothing():
    # Review helper 221: `"a" in f` copied field a, which the edit then committed (a new
    # version, a dirty flag) though nothing was written; `"zz" in f` and f.get("zz") raised.
    w = World((2, 2), {"a": np.float32, "b": np.uint8}, max_chunks=4)
    w.add(1)
    w.take_dirty_slots("a"), w.take_dirty_slots("b")
    before = w.version(1)
    with w.edit(1) as f:
        assert "a" in f and "b" in f and "zz" not in f and 3 not in f
        assert f.get("zz") is None and f.get("zz", 7) == 7
        assert f.taken == ()
    assert w.version(1) == before and not w.take_dirty_slots("a").size and not w.take_dirty_slots("b").size
    assert "a" in f  # after the edit too: a question, not a take
    with w.edit(1) as f:
        with pytest.raises(KeyError) as info:
            f["zz"]
        assert isinstance(info.value, WorldError) and "unknown field 'zz'" in str(info.value)
        f.get("a")[...] = 2.0  # get of a field takes it, as f["a"] does
    assert w.version(1) > before
    np.testing.assert_array_equal(w.read(1, "a"), 2.0)


def test_an_edit_whose_taken_array_was_reshaped_commits_nothing_and_says_which():
    # Review helper 221: a taken array reshaped in place (arr.shape = ...) failed the commit
    # half way, a raw ValueError: field a stored, b not, the version bumped, both dirty.
    w = World((2, 2), {"a": np.float32, "b": np.float32}, max_chunks=4)
    w.add(1)
    w.take_dirty_slots("a"), w.take_dirty_slots("b")
    before = w.version(1)
    with pytest.raises(WorldError, match=r"field 'b'.*shape \(4,\).*\(2, 2\)"):
        with w.edit(1) as f:
            f["a"][...] = 5.0
            f["b"].resize((4,), refcheck=False)  # (setting .shape is deprecated in numpy 2.5)
    assert w.version(1) == before and not w.take_dirty_slots("a").size and not w.take_dirty_slots("b").size
    np.testing.assert_array_equal(w.read(1, "a"), 0.0)


def test_unparking_for_an_unknown_consumer_keeps_the_parked_flags():
    # Review helper 221: the parked flags were dropped, then the call raised.
    class Owner:
        pass

    w = World((2,), {"a": np.float32}, max_chunks=2)
    owner = Owner()
    token = w.claim_dirty(owner)
    w.add(1)
    assert token is None  # the first claimant takes the world's own flags
    parked = w.park_dirty(owner, token)  # chunk 1's flag (slot 0), not taken yet
    assert w.take_dirty_slots("a").tolist() == [0]  # the world's own flags, cleared
    with pytest.raises(PluginError):
        w.unpark_dirty(parked, ["a"], consumer=12345)
    w.unpark_dirty(parked, ["a"])  # still there to unpark
    assert w.take_dirty_slots("a").tolist() == [0]
