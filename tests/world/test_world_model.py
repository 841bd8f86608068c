"""Random mutation sequences against a plain model: versions, dirty sets, slots, data, spans."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine_plugin.errors import StaleSpanError
from engine_plugin.gpu import upload_desc
from engine_plugin.world import World

KEYS = st.integers(0, 5)
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
    def spans_are_valid_exactly_while_their_chunk_is_unchanged(self) -> None:
        for span, key, version in self.spans:
            if self.versions.get(key) == version:
                assert np.array_equal(span.data()[0], self.data[key][span.tag])
            else:
                with pytest.raises(StaleSpanError):
                    span.data()


TestWorldModel = WorldModel.TestCase
TestWorldModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
