"""Random mutation sequences against a plain model: versions, dirty sets, slots, data, spans."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine_plugin.errors import StaleSpanError
from engine_plugin.gpu import upload_desc
from engine_plugin.gpu.descriptors import ChunkKeys, take_dirty_changes
from engine_plugin.world import World

# Small keys, the i64 bounds, and keys past i64 (the world then answers no key vector).
KEYS = st.sampled_from([0, 1, 2, 3, 2**63 - 1, -(2**63), 2**64, -(2**70)])
FIELDS = st.sampled_from(["h", "n"])
TILES = st.tuples(st.integers(0, 2), st.integers(0, 2))


class WorldModel(RuleBasedStateMachine):
    """Every mutation path bumps exactly the mutated chunk's version and dirties exactly what
    it touched; spans taken before a mutation or eviction go stale, others stay valid."""

    def __init__(self) -> None:
        super().__init__()
        self.world = World((3, 3), {"h": np.float32, "n": np.int32}, max_chunks=4)
        self.data: dict[int, dict[str, np.ndarray]] = {}
        self.versions: dict[int, int] = {}
        self.dirty: set[tuple[int, str]] = set()
        self.spans: list = []
        self.history: set[tuple[int, int]] = set()
        self.taken: list[tuple[object, list[int]]] = []  # take_dirty_changes' keys, as taken

    def _mutated(self, key: int, fields: list[str]) -> None:
        new = self.world.version(key)
        assert new > self.versions.get(key, 0)
        assert (key, new) not in self.history  # a (key, version) pair never repeats
        self.history.add((key, new))
        self.versions[key] = new
        self.dirty.update((key, f) for f in fields)

    @precondition(lambda self: len(self.data) < 4)
    @rule(key=KEYS)
    def add(self, key: int) -> None:
        if key in self.data:
            return
        self.world.add(key)
        self.data[key] = {"h": np.zeros((3, 3), np.float32), "n": np.zeros((3, 3), np.int32)}
        self._mutated(key, ["h", "n"])

    @rule(key=KEYS)
    def evict(self, key: int) -> None:
        if key not in self.data:
            return
        self.world.evict(key)
        del self.data[key], self.versions[key]
        self.dirty = {d for d in self.dirty if d[0] != key}

    @rule(key=KEYS, field=FIELDS, value=st.integers(-100, 100))
    def write(self, key: int, field: str, value: int) -> None:
        if key not in self.data:
            return
        self.world.write(key, field, value)
        self.data[key][field][:] = value
        self._mutated(key, [field])

    @rule(key=KEYS, field=FIELDS, tile=TILES, value=st.integers(-100, 100))
    def set_tile(self, key: int, field: str, tile: tuple[int, int], value: int) -> None:
        if key not in self.data:
            return
        self.world.set_tile(key, field, tile, value)
        self.data[key][field][tile] = value
        self._mutated(key, [field])

    @rule(key=KEYS, fields=st.lists(FIELDS, unique=True), tile=TILES, value=st.integers(-9, 9))
    def edit(self, key: int, fields: list[str], tile: tuple[int, int], value: int) -> None:
        if key not in self.data:
            return
        before = self.world.version(key)
        with self.world.edit(key) as f:
            for name in fields:
                f[name][tile] = value
                self.data[key][name][tile] = value
        if fields:
            self._mutated(key, fields)
        else:
            assert self.world.version(key) == before

    @rule(field=st.one_of(st.none(), FIELDS))
    def take_dirty(self, field: str | None) -> None:
        taken = set(self.world.take_dirty(field))
        expected = {d for d in self.dirty if field is None or d[1] == field}
        assert taken == expected
        self.dirty -= expected

    @rule(field=FIELDS)
    def take_dirty_changes(self, field: str) -> None:
        found = take_dirty_changes(self.world, field, spans=False)
        expected = sorted((self.world.slot(k), k) for k, f in self.dirty if f == field)
        assert list(found.keys) == [k for _, k in expected]
        assert found.slots.tolist() == [s for s, _ in expected]
        assert found.versions.tolist() == [self.versions[k] for _, k in expected]
        wide = any(not -(2**63) <= k < 2**63 for k in self.data)
        assert isinstance(found.keys, list) if wide else isinstance(found.keys, ChunkKeys)
        self.dirty = {d for d in self.dirty if d[1] != field}
        self.taken.append((found.keys, [k for _, k in expected]))

    @rule(key=KEYS, field=FIELDS)
    def take_span(self, key: int, field: str) -> None:
        if key in self.data:
            self.spans.append((upload_desc(self.world, field, key), key, self.versions[key]))

    @invariant()
    def world_matches_model(self) -> None:
        w = self.world
        assert sorted(self.data) == w.keys()
        assert set(w.dirty()) == self.dirty
        slots = [w.slot(k) for k in self.data]
        assert len(set(slots)) == len(slots) and all(0 <= s < 4 for s in slots)
        for key, fields in self.data.items():
            assert w.version(key) == self.versions[key]
            for name, arr in fields.items():
                assert np.array_equal(w.read(key, name), arr)

    @invariant()
    def key_vector_matches_the_slots(self) -> None:
        w = self.world
        slots = np.array(sorted(w.slot(k) for k in self.data), dtype=np.int64)
        vector = w.key_vector(slots)
        if any(not -(2**63) <= k < 2**63 for k in self.data):
            assert vector is None
        else:
            assert vector is not None and vector.tolist() == w.keys_at(slots.tolist())
        for keys, expected in self.taken:  # a snapshot: later adds and evictions change nothing
            assert list(keys) == expected

    @invariant()
    def spans_are_valid_exactly_while_their_chunk_is_unchanged(self) -> None:
        for span, key, version in self.spans:
            if self.versions.get(key) == version:
                assert np.array_equal(span.data()[0], self.data[key][span.tag])
            else:
                with pytest.raises(StaleSpanError):
                    span.data()


TestWorldModel = WorldModel.TestCase
TestWorldModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
