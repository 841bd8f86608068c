"""Adversarial checks of what ``encode_records`` may move (commit 46fcba8): a ``zero`` to the
front when no earlier record touches its buffer, a copy-only record to the end when no later
one touches its source or destination, nothing across a record whose bindings are unknown.

Every check reads bytes back from the GPU and compares them with an independent numpy model
that runs the same records strictly in the order they were recorded (what the submission
must be indistinguishable from):

* a seeded fuzz of prepared runs (zeroed, ``clear: false``, append, cross-buffer readers),
  raw zero records and copy-only records (area -> staging, area -> area, area -> a buffer a
  later run reads) over shared results areas, several submissions in a row;
* write-after-read: a run reading a buffer that a later run zeroes as its results area;
* a deferred one-shot run followed by prepared runs with a conversion (unknown bindings) in
  the middle of the submission;
* a GPU live count (``domain_count``) brought in by a copy-only record and snapshotted by a
  copy op inside the next dispatch record;
* the same prepared run recorded twice in one submission (its records, hence its ops, are
  the very same objects): FAILS, the second zero is dropped (see the test's docstring);
* engine frames: a writer product (field_buffer(kernel_writes=True)) and a reader product
  split into several dispatches per frame, a ``clear: false`` whole-dispatch output, an
  append; and the encoded shape of an engine frame whose products have several outputs
  (FAILS: a performance defect, see that test's docstring).
"""

from __future__ import annotations

import numpy as np
import pytest
import wgpu
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.engine import EngineConfig
from engine_plugin.gpu import ReadbackPolicy, WgpuBackendConfig
from engine_plugin.runtime import submission as submission_module
from engine_plugin.runtime.submission import Submission
from engine_plugin.world import World

_AREA = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_STAGING = wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
AREA_WORDS = 256  # 1 KiB results areas

# -- kernels -------------------------------------------------------------------------------

ACC_YAML = """\
bindings:
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: v, type: u32 }
"""
KEEP_YAML = ACC_YAML.replace('count: "n" }', 'count: "n", clear: false }')
ACC_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, out_get(i) + params.v + i);
}
"""
APP_YAML = """\
bindings:
  - { name: hits, kind: buffer, access: read_write, element: u32, capacity: "n", append: true }
params:
  - { name: v, type: u32 }
determinism: float_order
"""
# One invocation appends, in order: the appended values and their places are deterministic.
APP_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i != 0u || zero_n() == 0u) { return; }
    for (var j = 0u; j < (params.v % 5u) + 1u; j = j + 1u) { hits_append(params.v + j); }
}
"""
READ_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: u32 }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: v, type: u32 }
"""
READ_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, out_get(i) + src_get(i) * 2u + params.v);
}
"""
FREAD_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: v, type: u32 }
"""
FREAD_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, out_get(i) + u32(src_get(i) * 3.0) + params.v);
}
"""
LIVE_YAML = """\
bindings:
  - { name: live, kind: domain_count }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: v, type: u32 }
"""
LIVE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, out_get(i) + params.v + i);
}
"""


def _prog(key, yaml, wgsl):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")


_VARIANTS: dict = {}


def _variant(name):
    found = _VARIANTS.get(name)
    if found is None:
        yaml, wgsl = {
            "acc": (ACC_YAML, ACC_WGSL),
            "keep": (KEEP_YAML, ACC_WGSL),
            "app": (APP_YAML, APP_WGSL),
            "read": (READ_YAML, READ_WGSL),
            "fread": (FREAD_YAML, FREAD_WGSL),
            "live": (LIVE_YAML, LIVE_WGSL),
        }[name]
        found = _VARIANTS[name] = _prog(f"advorder/{name}", yaml, wgsl).variant()
    return found


def _words(gpu, buf):
    return np.frombuffer(gpu.queue.read_buffer(buf), dtype="<u4").copy()


def _copy_record(src, so, dst, do, size):
    return (None, None, None, (0, 0, 0), [("copy", src, so, dst, do, size)])


# -- the sequential model --------------------------------------------------------------------


class _Model:
    """Buffers as numpy u32 words; each step applied strictly in recording order."""

    def __init__(self):
        self.mem: dict[int, np.ndarray] = {}

    def add(self, buf, words):
        self.mem[id(buf)] = np.array(words, dtype=np.uint32)

    def __getitem__(self, buf):
        return self.mem[id(buf)]

    def zero(self, buf, offset, size):
        self[buf][offset // 4 : (offset + size) // 4] = 0

    def copy(self, src, so, dst, do, size):
        self[dst][do // 4 : (do + size) // 4] = self[src][so // 4 : (so + size) // 4]

    def run(self, kind, prepared, area, n, v, src=None):
        """The prepared run's own effect: its zeros (from its layout), then its kernel."""
        mem = self[area]
        if kind == "app":
            placed = prepared.layout["hits"]
            mem[placed.offset // 4 : placed.offset // 4 + max(n, 1)] = 0
            mem[placed.counter_offset // 4] = 0
            k = (v % 5) + 1 if n else 0
            base = placed.offset // 4
            mem[base : base + k] = v + np.arange(k, dtype=np.uint32)
            mem[placed.counter_offset // 4] = k
            return
        placed = prepared.layout["out"]
        base = placed.offset // 4
        if kind != "keep":
            mem[base : base + max(n, 1)] = 0
        if kind == "read":  # out += src * 2 + v
            add = self[src][:n] * np.uint32(2) + np.uint32(v)
        else:  # out += v + i
            add = v + np.arange(n, dtype=np.uint32)
        mem[base : base + n] += add.astype(np.uint32)


def _check_all(gpu, model, bufs, names):
    for buf, name in zip(bufs, names):
        got = _words(gpu, buf)
        want = model[buf]
        assert np.array_equal(got, want), f"{name}: first difference at word {int(np.argmax(got != want))}: got {got[:24].tolist()} want {want[:24].tolist()}"


# -- 1. a seeded fuzz of prepared runs, zeros and copies ----------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_fuzzed_submissions_of_prepared_runs_zeros_and_copies_match_the_recorded_order(gpu, seed):
    rng = np.random.default_rng(seed)
    dev = gpu.device
    areas = [dev.create_buffer(size=AREA_WORDS * 4, usage=_AREA, label=f"area{i}") for i in range(3)]
    aux = dev.create_buffer(size=AREA_WORDS * 4, usage=_AREA, label="aux")  # read by runs, written by copies
    model = _Model()
    for buf in areas + [aux]:
        init = rng.integers(0, 1000, AREA_WORDS, dtype=np.uint32)
        gpu.queue.write_buffer(buf, 0, init)
        model.add(buf, init)
    stagings: list = []
    for _ in range(3):  # submissions in a row: the areas carry over
        sub = Submission()
        prepared_runs = []
        for _ in range(int(rng.integers(6, 14))):
            what = rng.choice(["acc", "keep", "app", "read", "stage", "move", "zero"], p=[0.2, 0.15, 0.1, 0.15, 0.2, 0.12, 0.08])
            a = int(rng.integers(0, 3))
            area = areas[a]
            if what in ("acc", "keep", "app", "read"):
                n = int(rng.integers(5, 40))
                v = int(rng.integers(1, 500))
                inputs = None
                src = None
                if what == "read":
                    src = [b for b in areas + [aux] if b is not area][int(rng.integers(0, 3))]
                    inputs = {"src": src}
                prepared = _variant(what).prepare(n, inputs, {"v": v}, results=area)
                prepared_runs.append(prepared)
                for record in prepared.records:
                    sub.add(record)
                model.run(what, prepared, area, n, v, src)
            elif what == "stage":
                staging = dev.create_buffer(size=AREA_WORDS * 4, usage=_STAGING)
                model.add(staging, np.zeros(AREA_WORDS, np.uint32))
                sub.add(_copy_record(area, 0, staging, 0, AREA_WORDS * 4))
                model.copy(area, 0, staging, 0, AREA_WORDS * 4)
                stagings.append(staging)
            elif what == "move":  # area -> another area or aux: a later run may read or zero it
                dst = [b for b in areas + [aux] if b is not area][int(rng.integers(0, 3))]
                so, do = 4 * int(rng.integers(0, 8)), 4 * int(rng.integers(0, 8))
                size = 4 * int(rng.integers(1, 64))
                sub.add(_copy_record(area, so, dst, do, size))
                model.copy(area, so, dst, do, size)
            else:  # a raw zero-only record of part of a buffer
                buf = (areas + [aux])[int(rng.integers(0, 4))]
                off, size = 4 * int(rng.integers(0, 16)), 4 * int(rng.integers(1, 32))
                sub.add((None, None, None, (0, 0, 0), [("zero", buf, off, size)]))
                model.zero(buf, off, size)
        sub.submit(dev, gpu.queue, gpu.guard, "advorder fuzz")
        for prepared in prepared_runs:
            prepared.submitted()
    _check_all(gpu, model, areas + [aux], ["area0", "area1", "area2", "aux"])
    _check_all(gpu, model, stagings, [f"staging{i}" for i in range(len(stagings))])


# -- 2. directed orders ------------------------------------------------------------------------


def test_a_run_reading_a_buffer_that_a_later_run_zeroes_reads_the_old_bytes(gpu):
    """Write after read: the later run's zero of its results area must not move ahead of the
    earlier run that binds that area (only its ``binds`` tell: no op of the reader touches
    it), and a copy of the area after the later run sees the later run's values."""
    dev = gpu.device
    own, shared = (dev.create_buffer(size=AREA_WORDS * 4, usage=_AREA) for _ in range(2))
    old = np.arange(AREA_WORDS, dtype=np.uint32) * 7 + 3
    gpu.queue.write_buffer(shared, 0, old)
    gpu.queue.write_buffer(own, 0, np.zeros(AREA_WORDS, np.uint32))
    staging = dev.create_buffer(size=AREA_WORDS * 4, usage=_STAGING)
    reader = _variant("read").prepare(16, {"src": shared}, {"v": 1}, results=own)
    writer = _variant("acc").prepare(8, None, {"v": 100}, results=shared)
    sub = Submission()
    for record in reader.records:
        sub.add(record)
    for record in writer.records:
        sub.add(record)
    sub.add(_copy_record(shared, 0, staging, 0, AREA_WORDS * 4))
    sub.submit(dev, gpu.queue, gpu.guard, "advorder war")
    reader.submitted()
    writer.submitted()
    out = reader.layout["out"].offset // 4
    assert _words(gpu, own)[out : out + 16].tolist() == (old[:16] * 2 + 1).tolist()
    w = writer.layout["out"].offset // 4
    want = old.copy()
    want[w : w + 8] = 100 + np.arange(8)
    assert np.array_equal(_words(gpu, staging), want)
    assert np.array_equal(_words(gpu, shared), want)


def test_a_copy_into_a_buffer_a_later_run_reads_lands_before_that_run(gpu):
    """A copy-only record whose destination a later run binds stays before it (not sunk),
    and one whose source a later run rewrites copies the bytes before the rewrite."""
    dev = gpu.device
    a, b, t = (dev.create_buffer(size=AREA_WORDS * 4, usage=_AREA) for _ in range(3))
    for buf in (a, b, t):
        gpu.queue.write_buffer(buf, 0, np.full(AREA_WORDS, 0xDEAD, np.uint32))
    s1, s2 = (dev.create_buffer(size=AREA_WORDS * 4, usage=_STAGING) for _ in range(2))
    first = _variant("acc").prepare(16, None, {"v": 10}, results=a)
    reader = _variant("read").prepare(16, {"src": t}, {"v": 5}, results=b)
    again = _variant("acc").prepare(16, None, {"v": 70}, results=a)
    sub = Submission()
    for record in first.records:
        sub.add(record)
    o = first.layout["out"].offset
    sub.add(_copy_record(a, o, t, 0, 64))  # a's values -> t, which `reader` reads
    sub.add(_copy_record(a, 0, s1, 0, AREA_WORDS * 4))  # a before `again` rewrites it
    for record in reader.records:
        sub.add(record)
    for record in again.records:
        sub.add(record)
    sub.add(_copy_record(b, 0, s2, 0, AREA_WORDS * 4))
    sub.submit(dev, gpu.queue, gpu.guard, "advorder copy")
    for p in (first, reader, again):
        p.submitted()
    ten = 10 + np.arange(16)
    assert _words(gpu, t)[:16].tolist() == ten.tolist()
    assert _words(gpu, s1)[o // 4 : o // 4 + 16].tolist() == ten.tolist()
    r = reader.layout["out"].offset // 4
    assert _words(gpu, s2)[r : r + 16].tolist() == (ten * 2 + 5).tolist()
    assert _words(gpu, a)[o // 4 : o // 4 + 16].tolist() == (70 + np.arange(16)).tolist()


def test_a_deferred_run_then_prepared_runs_around_a_conversion(gpu):
    """A deferred one-shot run (flushed by prepare), then a submission whose middle run
    converts a chained u32 output to f32 (a record of unknown bindings: nothing moves across
    it) between runs that share one results area."""
    dev = gpu.device
    area, other = (dev.create_buffer(size=AREA_WORDS * 4, usage=_AREA) for _ in range(2))
    gpu.queue.write_buffer(area, 0, np.full(AREA_WORDS, 9, np.uint32))
    gpu.queue.write_buffer(other, 0, np.full(AREA_WORDS, 9, np.uint32))
    host = np.arange(32, dtype=np.uint32) * 3
    one_shot = _variant("read").run(32, inputs={"src": host}, params={"v": 2})  # deferred: host data only
    chained = one_shot.outputs["out"]  # host * 2 + 2 (pooled output, zeroed)
    s1, s2, s3 = (dev.create_buffer(size=AREA_WORDS * 4, usage=_STAGING) for _ in range(3))
    p1 = _variant("acc").prepare(32, None, {"v": 1000}, results=area)
    p2 = _variant("fread").prepare(32, {"src": chained}, {"v": 7}, results=other)
    p3 = _variant("keep").prepare(32, None, {"v": 50}, results=area)
    assert len(p2.records) == 2 and len(p2.records[0]) == 5  # a conversion record, bindings unknown
    sub = Submission()
    for record in p1.records:
        sub.add(record)
    sub.add(_copy_record(area, 0, s1, 0, AREA_WORDS * 4))
    for record in p2.records:
        sub.add(record)
    sub.add(_copy_record(other, 0, s2, 0, AREA_WORDS * 4))
    for record in p3.records:
        sub.add(record)
    sub.add(_copy_record(area, 0, s3, 0, AREA_WORDS * 4))
    sub.submit(dev, gpu.queue, gpu.guard, "advorder deferred")
    for p in (p1, p2, p3):
        p.submitted()
    i = np.arange(32, dtype=np.uint32)
    o1, o2, o3 = (p.layout["out"].offset // 4 for p in (p1, p2, p3))
    assert _words(gpu, s1)[o1 : o1 + 32].tolist() == (1000 + i).tolist()
    conv = (host * 2 + 2).astype(np.float32)
    assert _words(gpu, s2)[o2 : o2 + 32].tolist() == ((conv * np.float32(3)).astype(np.uint32) + 7).tolist()
    # keep (clear: false) adds onto what p1 left in the same area
    assert _words(gpu, s3)[o3 : o3 + 32].tolist() == (1000 + i + 50 + i).tolist()
    assert abi.read(chained).tolist() == (host * 2 + 2).tolist()


def test_a_live_count_copied_in_by_a_copy_record_is_snapshotted_after_that_copy(gpu):
    """A GPU domain count: an append run counts k items into area A, a copy-only record moves
    that counter to word 0 of C, and a prepared run with ``domain_count=C`` snapshots it (a
    copy op inside a dispatch record). The copy-only record must not sink past the snapshot,
    and the live run's zero of its own area may move to the front."""
    dev = gpu.device
    a, b, c = (dev.create_buffer(size=AREA_WORDS * 4, usage=_AREA) for _ in range(3))
    for buf in (a, b, c):
        gpu.queue.write_buffer(buf, 0, np.full(AREA_WORDS, 77, np.uint32))
    staging = dev.create_buffer(size=AREA_WORDS * 4, usage=_STAGING)
    app = _variant("app").prepare(16, None, {"v": 13}, results=a)  # appends 13 % 5 + 1 = 4 items
    k = 13 % 5 + 1
    counter = app.layout["hits"].counter_offset
    live = _variant("live").prepare(32, None, {"v": 500}, c, results=b)
    assert any(op[0] == "copy" and op[1] is c for op in live.records[-1][4])  # the snapshot
    sub = Submission()
    for record in app.records:
        sub.add(record)
    sub.add(_copy_record(a, counter, c, 0, 4))
    for record in live.records:
        sub.add(record)
    sub.add(_copy_record(b, 0, staging, 0, AREA_WORDS * 4))
    sub.add(_copy_record(a, 0, c, 0, 4))  # C rewritten after the snapshot: the run must not see it
    sub.submit(dev, gpu.queue, gpu.guard, "advorder live")
    app.submitted()
    live.submitted()
    o = live.layout["out"].offset // 4
    got = _words(gpu, staging)[o : o + 32]
    want = np.zeros(32, np.uint32)
    want[:k] = 500 + np.arange(k)
    assert got.tolist() == want.tolist()
    h = app.layout["hits"].offset // 4
    assert _words(gpu, a)[h : h + 16].tolist() == [13 + j for j in range(k)] + [0] * (16 - k)
    assert _words(gpu, c)[0] == 13  # the last copy: word 0 of A, the first appended value


def test_the_same_prepared_run_recorded_twice_zeroes_its_outputs_twice(gpu):
    """DEFECT (commit 46fcba8). A prepared run's records added twice to one submission
    (dispatch the same run twice; each copy read back): the record tuple, hence its ops list
    and its ``("zero", area, ...)`` op, is the very same object both times. ``_movable``
    hoists the first zero (nothing earlier touches the area) and ``encode_records`` then
    skips every op whose ``id()`` is in ``moved``, so the second occurrence of that op, which
    was NOT hoisted (the first dispatch and copy touched the area), is dropped: the second
    dispatch accumulates onto the first one's results. Encoded: clear(area), dispatch, copy
    -> s1, dispatch, copy -> s2 (no zero before the second dispatch). Before the change both
    zeros stayed in place. Expected s2 == [10, 11, 12, 13]; got [20, 22, 24, 26]."""
    dev = gpu.device
    area = dev.create_buffer(size=AREA_WORDS * 4, usage=_AREA)
    s1, s2 = (dev.create_buffer(size=AREA_WORDS * 4, usage=_STAGING) for _ in range(2))
    prepared = _variant("acc").prepare(4, None, {"v": 10}, results=area)
    sub = Submission()
    for staging in (s1, s2):
        for record in prepared.records:
            sub.add(record)
        sub.add(_copy_record(area, 0, staging, 0, AREA_WORDS * 4))
    sub.submit(dev, gpu.queue, gpu.guard, "advorder twice")
    prepared.submitted()
    o = prepared.layout["out"].offset // 4
    assert _words(gpu, s1)[o : o + 4].tolist() == [10, 11, 12, 13]
    assert _words(gpu, s2)[o : o + 4].tolist() == [10, 11, 12, 13]


# -- 3. engine frames ----------------------------------------------------------------------------

SHAPE = (4, 4)
TC = SHAPE[0] * SHAPE[1]

WRITE_YAML = """\
bindings:
  - { name: tiles, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: state, kind: buffer, access: read_write, element: f32 }
"""
WRITE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    state_set(t, height_get(t) * 2.0 + 1.0);
}
"""
# Per chunk: (state, height) at its first tile, the state the writer left this frame; `acc`
# accumulates onto its own zeroed words; `tot` (clear: false) keeps counting over every
# dispatch of the product; `odd` appends the odd slots.
READER_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: state, kind: buffer, access: read, element: f32 }
  - { name: pair, kind: buffer, access: read_write, element: vec2<f32>, count: "n" }
  - { name: acc, kind: buffer, access: read_write, element: u32, count: "n" }
  - { name: tot, kind: buffer, access: read_write, element: u32, count: "4", clear: false }
  - { name: odd, kind: buffer, access: read_write, element: u32, capacity: "n", append: true }
params:
  - { name: tile_count, type: u32 }
determinism: float_order
"""
READER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let slot = chunks_get(i);
    let base = slot * params.tile_count;
    pair_set(i, vec2<f32>(state_get(base), height_get(base)));
    acc_set(i, acc_get(i) + slot + 1u);
    if (i == 0u) {
        tot_set(0u, tot_get(0u) + 1u);
        tot_set(1u, tot_get(1u) + zero_n());
    }
    if ((slot & 1u) == 1u) { odd_append(slot); }
}
"""


def _engine_world(n):
    world = World(SHAPE, {"height": np.float32, "state": np.float32}, max_chunks=n)
    rng = np.random.default_rng(5)
    for k in range(n):
        world.add(k, {"height": np.round(rng.standard_normal(SHAPE, dtype=np.float32) * 8), "state": np.zeros(SHAPE, np.float32)})
    return world


def test_engine_frames_writer_and_split_reader_products_match_numpy(make_engine):
    """Two products in one frame: a writer of a kernel-written field mirror, then a reader of
    it whose work is split into several dispatches of one submission (max_chunks_per_dispatch)
    in one results area: zeroed outputs, a ``clear: false`` counter kept across dispatches and
    frames, an append. Every result is checked against numpy."""
    n = 11
    world = _engine_world(n)
    cfg = EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=3), max_dispatches_per_product=8)
    engine = make_engine(world, config=cfg)
    state = engine.field_buffer("state", kernel_writes=True)
    engine.register_product(
        _prog("advorder/writer", WRITE_YAML, WRITE_WGSL), key="writer", fields={"height": "height", "state": "state"}, policy=ReadbackPolicy.NONE
    )
    applied = Applied(world)
    engine.register_product(_prog("advorder/reader", READER_YAML, READER_WGSL), key="reader", fields={"height": "height", "state": "state"}, apply=applied)
    st = engine.frame()
    assert st.dispatches == 4 + 4  # writer and reader: 11 chunks in dispatches of at most 3
    run_until_idle(engine)
    edited = [2, 5, 6, 9]
    for k in edited:
        world.write(k, "height", world.read(k, "height") + np.float32(3))
    run_until_idle(engine)

    assert not applied.not_current
    assert sorted(applied.keys_applied) == sorted(list(range(n)) + edited)
    dispatches = 0
    for r in applied.results:
        slots = [world.slot(k) for k in r.keys]
        assert r.outputs["acc"].tolist() == [s + 1 for s in slots]
        assert sorted(r.outputs["odd"].tolist()) == sorted(s for s in slots if s & 1)
        dispatches += 1
        # clear: false: the counter is the product's running total over its dispatches so far
        assert r.outputs["tot"][0] == dispatches, [x.outputs["tot"].tolist() for x in applied.results]
    assert applied.results[-1].outputs["tot"][1] == n + len(edited)
    for k in range(n):
        h = world.read(k, "height").reshape(-1)
        assert applied.latest[k].reshape(-1).tolist() == [float(h[0] * 2 + 1), float(h[0])], k
    mirror = np.frombuffer(abi.read(state), np.float32).reshape(world.max_chunks, TC)
    for k in range(n):
        assert np.array_equal(mirror[world.slot(k)], world.read(k, "height").reshape(-1) * np.float32(2) + np.float32(1)), k


class _Proxy:
    """A command encoder that forwards everything and writes down its shape."""

    def __init__(self, encoder, log):
        self.encoder, self.log = encoder, log

    def clear_buffer(self, buf, offset=0, size=None):
        self.log.append("clear")
        self.encoder.clear_buffer(buf, offset, size)

    def copy_buffer_to_buffer(self, *args):
        self.log.append("copy")
        self.encoder.copy_buffer_to_buffer(*args)

    def begin_compute_pass(self, **kwargs):
        self.log.append("pass")
        return _PassProxy(self.encoder.begin_compute_pass(**kwargs), self.log)


class _PassProxy:
    def __init__(self, cpass, log):
        self.cpass, self.log = cpass, log

    def set_pipeline(self, pipeline):
        self.cpass.set_pipeline(pipeline)

    def set_bind_group(self, *args):
        self.cpass.set_bind_group(*args)

    def dispatch_workgroups(self, *args):
        self.log.append("dispatch")
        self.cpass.dispatch_workgroups(*args)

    def end(self):
        self.cpass.end()


def _shape(log):
    """Runs of equal entries collapsed: ['clear', 'pass', 'dispatch', 'copy'] etc."""
    out: list = []
    for entry in log:
        if not out or out[-1] != entry:
            out.append(entry)
    return out


@pytest.mark.parametrize("timing", [False, True])
def test_an_engine_frame_of_products_with_several_outputs_encodes_as_one_pass(make_engine, monkeypatch, timing):
    """An engine frame encodes as its clears, ONE compute pass of every product's dispatch,
    then the readback copies, also for products with several zeroed outputs (several outputs
    in one results area, an append's counter): each zero goes to the front. With per-product
    GPU timing on, a product's first dispatch is timed in a pass of its own; the frames after
    it (untimed until ``gpu_timing_every`` frames pass) are one pass again."""
    log: list = []
    encode = submission_module.encode_records

    def logged(encoder, records, timings=None):
        return encode(_Proxy(encoder, log), records, timings)

    world = _engine_world(6)
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(gpu_timing=timing)))
    a, b = Applied(world), Applied(world)
    prog = _prog("advorder/reader", READER_YAML, READER_WGSL)
    engine.register_product(prog, key="a", fields={"height": "height", "state": "state"}, apply=a)
    engine.register_product(prog, key="b", fields={"height": "height", "state": "state"}, apply=b)
    if timing:
        assert engine.frame().dispatches == 2  # the timed first dispatches
        run_until_idle(engine)
        for k in range(6):
            world.write(k, "height", world.read(k, "height") + 1.0)
        a.results.clear()
        b.results.clear()
    monkeypatch.setattr(submission_module, "encode_records", logged)
    st = engine.frame()
    monkeypatch.setattr(submission_module, "encode_records", encode)
    assert st.dispatches == 2
    run_until_idle(engine)
    for applied in (a, b):  # the numbers are right either way
        (r,) = applied.results
        slots = [world.slot(k) for k in r.keys]
        assert r.outputs["acc"].tolist() == [s + 1 for s in slots]
        assert sorted(r.outputs["odd"].tolist()) == sorted(s for s in slots if s & 1)
    assert _shape(log) == ["clear", "pass", "dispatch", "copy"], log
