"""A field's upload spans as vectors (``SpanList``) and the wgpu backend's write of them.

The backend writes a span list straight from its vectors (one range check, chunk versions
compared only when the world's clock moved). These tests hold it, against bytes read back
from lavapipe, to an independent model of what the per-span path promises: spans are the
runs of dirty slots joined over gaps of at most ``max_gap`` free-or-clean slots; each is
written with the world's bytes at the time of its write unless one of its chunks changed
or left after the spans were taken, which stops the upload there with ``StaleSpanError``
naming that chunk and counting the spans written before it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine_plugin.errors import StaleSpanError
from engine_plugin.gpu import field_mirror_desc
from engine_plugin.gpu.backend import upload_spans
from engine_plugin.gpu.descriptors import ChunkKeys, SpanList, UploadDesc, spans_nbytes, take_dirty_changes
from engine_plugin.runtime.output import read_words
from engine_plugin.world import World

SLOTS = 24
TILE = (4, 4)


def _world() -> World:
    return World(TILE, {"h": np.float32}, max_chunks=SLOTS)


def _mirror(be) -> np.ndarray:
    return np.frombuffer(read_words(be.field_buffer("h")), np.float32).reshape(SLOTS, -1)[:, :16].copy()


def _model_spans(dirty_slots: list[int], gap: int) -> list[list[int]]:
    """Runs of the sorted dirty slots, joined where the next is at most ``gap + 1`` away."""
    runs: list[list[int]] = []
    for s in sorted(dirty_slots):
        if runs and s - runs[-1][-1] <= gap + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


class _MutatingQueue:
    """The backend's queue, recording the world's field as each write is made, with world
    edits landing right after chosen writes (another thread editing the world mid-upload)."""

    def __init__(self, queue, after: dict[int, list], world: World):
        self.queue, self.after, self.world = queue, after, world
        self.seen: list[np.ndarray] = []  # the world's rows at each write

    def write_buffer(self, *args):
        self.seen.append(self.world.mirror("h").reshape(SLOTS, -1).copy())
        self.queue.write_buffer(*args)
        for action in self.after.get(len(self.seen) - 1, ()):
            action(self.world)

    def __getattr__(self, name):
        return getattr(self.queue, name)


def _act(what: str, key: int):
    if what == "edit":
        return lambda w: w.write(key, "h", float(200 + key)) if key in w else None
    return lambda w: w.evict(key) if key in w else None


@pytest.fixture(scope="module")
def backend(ctx):
    from engine_plugin.gpu.wgpu_backend import WgpuBackend

    be = WgpuBackend(ctx)
    assert be.register_field(field_mirror_desc(_world(), "h"))
    yield be
    be.close()


ops = st.lists(
    st.tuples(st.sampled_from(["edit", "evict"]), st.integers(0, SLOTS - 1), st.integers(-1, 6)),  # (what, key, after write k; -1: before)
    max_size=4,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    live=st.sets(st.integers(0, SLOTS - 1), min_size=1),
    dirty=st.sets(st.integers(0, SLOTS - 1)),
    gap=st.integers(0, 3),
    later=ops,
)
@example(live=set(range(SLOTS)), dirty=set(range(SLOTS)), gap=0, later=[])  # the whole world: one span
@example(live=set(range(SLOTS)), dirty={0, 10, 20}, gap=0, later=[("edit", 10, 0)])  # stale mid-upload
@example(live=set(range(SLOTS)), dirty={0, 10, 20}, gap=0, later=[("edit", 0, 0), ("edit", 20, 0)])  # a written span's chunk changes too
@example(live=set(range(SLOTS)), dirty={0, 2, 9}, gap=1, later=[("edit", 1, -1)])  # a changed filler slot is no stale chunk
@example(live={1, 2, 5}, dirty={1, 2, 5}, gap=3, later=[("evict", 5, -1)])  # an evicted chunk
def test_a_span_list_writes_what_the_per_span_contract_says(backend, live, dirty, gap, later):
    w = _world()
    for k in sorted(live):
        w.add(k, {"h": np.full(TILE, k + 1, np.float32)})
    w.take_dirty()  # what the backend's mirror holds is read back below; start with nothing owed
    dirty = {k for k in dirty if k in live}
    for k in sorted(dirty):
        w.write(k, "h", float(100 + k))
    before = _mirror(backend)
    found = take_dirty_changes(w, "h", gap)
    spans = found.spans
    assert type(spans) is SpanList or not dirty
    slot_key = {w.slot(k): k for k in dirty}
    runs = _model_spans(list(slot_key), gap)
    after: dict[int, list] = {}
    changed_before: set[int] = set()
    for what, key, k in later:
        if k < 0:
            _act(what, key)(w)
            changed_before.add(key)
        else:
            after.setdefault(k, []).append(_act(what, key))
    queue = backend.queue
    backend.queue = mutating = _MutatingQueue(queue, after, w)
    uploads = backend.stats["uploads"]
    raised = None
    try:
        try:
            written = upload_spans(backend, spans)
        except StaleSpanError as exc:
            raised, written = exc, exc.written
    finally:
        backend.queue = queue
    # The model: span i is stale when one of its chunks was edited or evicted before it was
    # taken up (before the upload, or right after an earlier write); else it is written with
    # the world's rows as they were at its write.
    changed = {k for k in changed_before if k in dirty}
    want_written, want_stale = 0, None
    for i, r in enumerate(runs):
        stale = [slot_key[s] for s in r if slot_key[s] in changed]
        if stale:
            want_stale = stale[0]
            break
        want_written += 1
        changed |= {key for what, key, k in later if k == i and key in dirty}
    assert written == want_written == len(mutating.seen)
    if want_stale is None:
        assert raised is None
        assert not dirty or spans._descs == [None] * len(runs)  # written from the vectors: no descriptor made
    else:
        assert raised is not None and f"chunk {want_stale} " in str(raised)
    assert [(d.first_slot, d.slot_count, d.chunk_keys) for d in spans] == [(r[0], r[-1] - r[0] + 1, tuple(slot_key[s] for s in r)) for r in runs]
    assert backend.stats["uploads"] - uploads == want_written
    model = before
    for r, seen in zip(runs, mutating.seen):
        model[r[0] : r[-1] + 1] = seen[r[0] : r[-1] + 1]
    np.testing.assert_array_equal(_mirror(backend), model)


def test_a_span_list_is_the_sequence_of_descriptors_the_per_chunk_path_makes():
    from engine_plugin.gpu.descriptors import coalesce_uploads

    w = _world()
    for k in range(21):  # chunk k in slot k; the others leave free slots between
        w.add(k)
    for k in set(range(21)) - {1, 2, 3, 7, 9, 10, 20}:
        w.evict(k)
    found = take_dirty_changes(w, "h", max_gap=1)
    spans = found.spans
    want = coalesce_uploads(w, "h", found.keys, max_gap=1)
    assert type(spans) is SpanList and len(spans) == len(want) == 3
    assert spans == want and list(spans) == want and spans[-1] == want[-1] and spans[1:] == want[1:]
    assert all(type(d) is UploadDesc for d in spans) and spans[0] is spans[0]  # made once
    with pytest.raises(IndexError):
        spans[3]
    assert spans_nbytes(spans, 2) == spans_nbytes(want, 2) == sum(d.nbytes for d in want[:2])
    assert dataclasses.replace(spans[2], nbytes=8).nbytes == 8


def test_a_span_list_past_the_mirror_is_refused_after_the_spans_before_it(ctx, make_backend):
    small = World(TILE, {"h": np.float32}, max_chunks=8)  # the backend mirrors 8 slots; the world has 24
    be = make_backend(ctx)
    assert be.register_field(field_mirror_desc(small, "h"))
    w = _world()
    for k in range(21):  # chunk k in slot k
        w.add(k, {"h": np.full(TILE, k + 1, np.float32)})
    for k in set(range(21)) - {1, 2, 12, 20}:
        w.evict(k)
    spans = take_dirty_changes(w, "h", max_gap=0).spans
    order = sorted((w.slot(k), k) for k in (1, 2, 12, 20))
    assert upload_spans(be, spans) == 1  # slots 1 and 2 are one span; the next is past slot 7
    assert "outside the mirror" in be.last_refusal
    got = np.frombuffer(read_words(be.field_buffer("h")), np.float32).reshape(8, -1)[:, :16]
    for slot, k in order[:2]:
        assert (got[slot] == k + 1).all()
    assert be.stats["uploads"] == 1 and be.stats["upload_bytes"] == 2 * 64


def test_a_span_list_keeps_its_own_keys_and_versions(backend):
    """The keys and versions a take answers cannot change under its spans: the keys are an
    immutable sequence over a read-only vector, the versions vector is read-only (review: the
    spans once shared a caller's list and vector, which the caller could change)."""
    w = _world()
    for k in (30, 10, 20):  # slots 0, 1, 2
        w.add(k)
    found = take_dirty_changes(w, "h")
    assert isinstance(found.keys, ChunkKeys) and found.keys == [30, 10, 20]
    with pytest.raises(AttributeError):
        found.keys.sort()  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        found.keys.vector[0] = 99
    with pytest.raises(ValueError):
        found.versions[:] = w.slot_versions(found.slots)
    w.write(20, "h", 1.0)  # chunk 20 changes after the take
    with pytest.raises(StaleSpanError, match="chunk 20 ") as info:
        upload_spans(backend, found.spans)
    assert info.value.written == 0
    assert found.spans == [UploadDesc("h", (30, 10, 20), tuple(found.spans.versions.tolist()), 0, 0, 3 * 64, w)]
    assert found.spans != tuple(found.spans)  # compared as the list it stands for


def test_taken_keys_are_a_snapshot_of_the_slots_at_the_take():
    """A chunk evicted and its slot reused after the take: the keys still name the chunks that
    were taken (the vector is copied at the take, not read from the world later)."""
    w = _world()
    for k in (30, 10, 20):
        w.add(k)
    found = take_dirty_changes(w, "h", spans=False)
    w.evict(10)
    w.add(77)  # takes slot 1, 10's
    assert list(found.keys) == [30, 10, 20] and found.keys.tolist() == [30, 10, 20]
    assert found.keys[1] == 10 and 10 in found.keys and 77 not in found.keys


def test_keys_past_i64_take_the_list_path_with_the_same_spans(backend):
    """A world holding a key outside i64 answers its keys as a list (no vector can hold them);
    the spans and the bytes written are the same as for small keys."""
    big = 2**70
    w = _world()
    for k in (5, big, 7):
        w.add(k, {"h": np.full(TILE, 3.0, np.float32)})
    assert w.key_vector(np.array([0, 1, 2])) is None
    found = take_dirty_changes(w, "h")
    assert type(found.keys) is list and found.keys == [5, big, 7]
    assert [d.chunk_keys for d in found.spans] == [(5, big, 7)]
    assert upload_spans(backend, found.spans) == 1
    np.testing.assert_array_equal(_mirror(backend)[:3], np.full((3, 16), 3.0, np.float32))
    w.evict(big)  # the last wide key gone: the vector path again
    w.write(5, "h", 1.0)
    assert isinstance(take_dirty_changes(w, "h").keys, ChunkKeys)


def test_a_world_whose_slab_answers_other_bytes_is_written_through_slab(backend):
    """The vector path slices World's own rows; a world type whose ``slab`` differs is written
    span by span through ``slab`` (review: it wrote the mirror's rows)."""

    class Offset(World):
        def slab(self, name, first_slot, count=1):
            return np.ascontiguousarray(super().slab(name, first_slot, count) + 100)

    w = Offset(TILE, {"h": np.float32}, max_chunks=SLOTS)
    for k in range(3):
        w.add(k, {"h": np.full(TILE, k + 1, np.float32)})
    assert upload_spans(backend, take_dirty_changes(w, "h").spans) == 1
    np.testing.assert_array_equal(_mirror(backend)[:3], np.repeat([[101.0], [102.0], [103.0]], 16, axis=1))


def test_a_wide_key_evicted_through_an_equal_float_leaves_the_vector_path():
    """The wide-key count follows the key stored, not the object evict was called with (a
    float equal to 2**63 once left the world on the slow list path for good)."""
    w = _world()
    w.add(2**63)
    w.evict(np.float64(2.0**63))
    w.add(1)
    assert w.key_vector(np.array([0])) is not None
    assert isinstance(take_dirty_changes(w, "h").keys, ChunkKeys)


def test_a_world_subclass_answering_its_own_keys_at_is_asked_through_it():
    class Renamed(World):
        def keys_at(self, slots):
            return [k + 1000 for k in super().keys_at(slots)]

    w = Renamed(TILE, {"h": np.float32}, max_chunks=SLOTS)
    for k in (1, 2):
        w.add(k)
    found = take_dirty_changes(w, "h")
    assert list(found.keys) == [1001, 1002] and found.spans[0].chunk_keys == (1001, 1002)


def test_chunk_keys_and_versions_cannot_be_made_writeable_or_alias_the_caller():
    import pickle

    mine = np.arange(4)
    keys = ChunkKeys(mine)
    mine[0] = 99  # the caller's array stays the caller's, and writeable
    assert keys == [0, 1, 2, 3] and np.asarray(keys).dtype == np.int64
    for k in (keys, pickle.loads(pickle.dumps(keys))):
        assert k == [0, 1, 2, 3]
        with pytest.raises(ValueError):
            k.vector.flags.writeable = True
    w = _world()
    w.add(5)
    found = take_dirty_changes(w, "h")
    for vector in (found.versions, found.spans.versions, found.keys.vector):
        with pytest.raises(ValueError):
            vector.flags.writeable = True
    assert found.spans.keys == (5,)
