"""What ``encode_records`` may move (runtime/submission.py): a ``zero`` to the front when no
earlier record touches its buffer, a copy-only record to the end when no later record does,
nothing across a record whose bindings are unknown. An engine frame then encodes as its clears,
one compute pass of every product's dispatch, and the readback copies (raw's shape: the GPU
overlaps the dispatches), while a results area used twice in one submission keeps its order.
"""

from __future__ import annotations

import numpy as np
import wgpu

from engine_plugin import abi
from engine_plugin.runtime.submission import Submission, encode_records

YAML = """\
bindings:
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: v, type: u32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, params.v + i);
}
"""
_AREA = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_STAGING = wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST


class _Log:
    """A command encoder that writes down what is encoded, by buffer name."""

    def __init__(self, names):
        self.names, self.log = names, []

    def clear_buffer(self, buf, offset=0, size=None):
        self.log.append(("clear", self.names[id(buf)]))

    def copy_buffer_to_buffer(self, src, so, dst, do, size):
        self.log.append(("copy", self.names[id(src)], self.names[id(dst)]))

    def begin_compute_pass(self, **_):
        self.log.append(("pass",))
        return self

    def set_pipeline(self, pipeline):
        pass

    def set_bind_group(self, index, group, offsets=None):
        pass

    def dispatch_workgroups(self, x, y=1, z=1):
        self.log.append(("dispatch", self.names[id(x)] if id(x) in self.names else x))

    def end(self):
        self.log.append(("end",))


class _Buf:
    pass


def _encode(records, names):
    log = _Log(names)
    encode_records(log, records)
    return log.log


def _bufs(*names):
    bufs = [_Buf() for _ in names]
    return bufs, {id(b): n for b, n in zip(bufs, names)}


def test_an_engine_frame_encodes_as_clears_one_pass_then_copies():
    (a, b, sa, sb, field), names = _bufs("A", "B", "SA", "SB", "field")
    records = [
        ("p", "g", 0, (1, 1, 1), [("zero", a, 0, 16)], frozenset([a, field])),
        (None, None, None, (0, 0, 0), [("copy", a, 0, sa, 0, 16)]),
        ("p", "g", 0, (2, 1, 1), [("zero", b, 0, 16)], frozenset([b, field])),
        (None, None, None, (0, 0, 0), [("copy", b, 0, sb, 0, 16)]),
    ]
    assert _encode(records, names) == [
        ("clear", "A"),
        ("clear", "B"),
        ("pass",),
        ("dispatch", 1),
        ("dispatch", 2),
        ("end",),
        ("copy", "A", "SA"),
        ("copy", "B", "SB"),
    ]


def test_a_results_area_used_twice_keeps_zero_dispatch_copy_in_order():
    (a, s1, s2), names = _bufs("A", "S1", "S2")
    records = [
        ("p", "g", 0, (1, 1, 1), [("zero", a, 0, 16)], frozenset([a])),
        (None, None, None, (0, 0, 0), [("copy", a, 0, s1, 0, 16)]),
        ("p", "g", 0, (2, 1, 1), [("zero", a, 0, 16)], frozenset([a])),
        (None, None, None, (0, 0, 0), [("copy", a, 0, s2, 0, 16)]),
    ]
    assert _encode(records, names) == [
        ("clear", "A"),
        ("pass",),
        ("dispatch", 1),
        ("end",),
        ("copy", "A", "S1"),
        ("clear", "A"),
        ("pass",),
        ("dispatch", 2),
        ("end",),
        ("copy", "A", "S2"),
    ]


def test_nothing_moves_across_a_record_with_unknown_bindings():
    (a, b, sa), names = _bufs("A", "B", "SA")
    records = [
        ("p", "g", 0, (1, 1, 1), [("zero", a, 0, 16)], frozenset([a])),
        (None, None, None, (0, 0, 0), [("copy", a, 0, sa, 0, 16)]),
        ("p", "g", 0, (2, 1, 1), []),  # binds unknown: may read A or SA, may write B
        ("p", "g", 0, (3, 1, 1), [("zero", b, 0, 16)], frozenset([b])),
    ]
    assert _encode(records, names) == [
        ("clear", "A"),
        ("pass",),
        ("dispatch", 1),
        ("end",),
        ("copy", "A", "SA"),
        ("pass",),
        ("dispatch", 2),
        ("end",),
        ("clear", "B"),
        ("pass",),
        ("dispatch", 3),
        ("end",),
    ]


def test_a_copy_into_a_buffer_a_later_dispatch_binds_stays_before_it():
    (a, shared), names = _bufs("A", "shared")
    records = [
        (None, None, None, (0, 0, 0), [("copy", a, 0, shared, 0, 16)]),
        ("p", "g", 0, (1, 1, 1), [], frozenset([shared])),
    ]
    assert _encode(records, names) == [("copy", "A", "shared"), ("pass",), ("dispatch", 1), ("end",)]


def _variant(key):
    return abi.program(key=key, schema=abi.parse(YAML, f"{key}/bindings.yaml"), wgsl=WGSL, wgsl_path=f"{key}/kernel.wgsl").variant()


def _words(gpu, buf, offset, count):
    return np.frombuffer(gpu.queue.read_buffer(buf), dtype="<u4")[offset // 4 : offset // 4 + count].tolist()


def test_on_the_gpu_two_runs_in_one_area_each_copy_their_own_values_and_other_areas_overlap(gpu):
    """Three prepared runs in one submission: two of them in the same results area (each copied
    out before the next zeroes it), one in its own area whose zero moves to the front."""
    variant = _variant("order/area")
    shared = gpu.device.create_buffer(size=256, usage=_AREA)
    own = gpu.device.create_buffer(size=256, usage=_AREA)
    gpu.queue.write_buffer(shared, 0, np.full(64, 0xDEAD, dtype="<u4"))
    gpu.queue.write_buffer(own, 0, np.full(64, 0xBEEF, dtype="<u4"))
    first = variant.prepare(4, params={"v": 100}, results=shared)
    other = variant.prepare(6, params={"v": 500}, results=own)
    second = variant.prepare(2, params={"v": 300}, results=shared)
    staging = [gpu.device.create_buffer(size=256, usage=_STAGING) for _ in range(3)]
    sub = Submission()
    for prepared, area, stage in ((first, shared, staging[0]), (other, own, staging[1]), (second, shared, staging[2])):
        for record in prepared.records:
            sub.add(record)
        sub.add((None, None, None, (0, 0, 0), [("copy", area, 0, stage, 0, 256)]))
    sub.submit(gpu.device, gpu.queue, gpu.guard, "order test")
    for prepared in (first, other, second):
        prepared.submitted()
    out = first.layout["out"]
    assert _words(gpu, staging[0], out.offset, 4) == [100, 101, 102, 103]
    out = other.layout["out"]
    assert _words(gpu, staging[1], out.offset, 6) == [500 + i for i in range(6)]
    out = second.layout["out"]
    # The second run zeroed its own 2 words (placed at the same offset) and wrote them.
    assert _words(gpu, staging[2], out.offset, 2) == [300, 301]
    assert _words(gpu, shared, out.offset, 2) == [300, 301]


def test_a_one_shot_run_and_its_read_keep_their_shape():
    (out, staging), names = _bufs("out", "staging")
    records = [
        ("p", "g", 0, (1, 1, 1), [("clear", out, 0, 16)]),
        (None, None, None, (0, 0, 0), [("copy", out, 0, staging, 0, 16)]),
    ]
    assert _encode(records, names) == [("clear", "out"), ("pass",), ("dispatch", 1), ("end",), ("copy", "out", "staging")]


def test_a_zero_after_the_last_dispatch_stays_after_a_copy_of_its_buffer():
    (a, sa), names = _bufs("A", "SA")
    records = [
        ("p", "g", 0, (1, 1, 1), [], frozenset([a])),
        (None, None, None, (0, 0, 0), [("copy", a, 0, sa, 0, 16)]),
        (None, None, None, (0, 0, 0), [("zero", a, 0, 16)]),
    ]
    assert _encode(records, names) == [("pass",), ("dispatch", 1), ("end",), ("copy", "A", "SA"), ("clear", "A")]
