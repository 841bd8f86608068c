"""The params ring (256 slots a variant) shared by prepared runs (the engine's), immediate
``variant.run`` and ``abi.batch()``: a prepared run's params slot must not be reused by any
other run of the variant before the prepared run is submitted (variant.py: the params ring's reserved slots)."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from engine_plugin import abi
from engine_plugin.runtime.submission import Submission

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


def _variant(key):
    return abi.program(key=key, schema=abi.parse(YAML, f"{key}/bindings.yaml"), wgsl=WGSL, wgsl_path=f"{key}/kernel.wgsl").variant()


def _prepared(gpu, variant, v):
    results = gpu.device.create_buffer(size=256, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    return results, variant.prepare(4, params={"v": v}, results=results)


def _submit(gpu, prepared):
    sub = Submission()
    for record in prepared.records:
        sub.add(record)
    sub.submit(gpu.device, gpu.queue, gpu.guard, "adv")
    prepared.submitted()


def _read(gpu, results, prepared):
    placed = prepared.layout["out"]
    return np.frombuffer(gpu.queue.read_buffer(results), dtype="<u4")[placed.offset // 4 : placed.offset // 4 + 4].tolist()


def test_many_runs_in_one_batch_wrap_the_ring_with_every_params_intact():
    variant = _variant("adv/ring_batch")
    with abi.batch():
        runs = [variant.run(4, params={"v": 1000 * j}) for j in range(600)]
    for j, run in enumerate(runs):
        assert abi.read(run.outputs["out"]).tolist() == [1000 * j + i for i in range(4)], j


def test_immediate_runs_never_reuse_a_prepared_runs_params_slot(gpu):
    variant = _variant("adv/ring_run")
    results, prepared = _prepared(gpu, variant, 7)
    for j in range(256):
        variant.run(4, params={"v": 100_000 + j})
    _submit(gpu, prepared)
    assert _read(gpu, results, prepared) == [7, 8, 9, 10]


def test_batched_runs_never_reuse_a_prepared_runs_params_slot(gpu):
    variant = _variant("adv/ring_batch_prep")
    results, prepared = _prepared(gpu, variant, 7)
    with abi.batch():
        for j in range(256):
            variant.run(4, params={"v": 100_000 + j})
    _submit(gpu, prepared)
    assert _read(gpu, results, prepared) == [7, 8, 9, 10]


def test_prepared_runs_past_the_ring_are_refused_not_overwritten(gpu):
    from engine_plugin.errors import DispatchError

    variant = _variant("adv/ring_prep")
    made = []
    with pytest.raises(DispatchError, match="not submitted yet"):
        for j in range(300):
            made.append(_prepared(gpu, variant, 10 * j))
    assert len(made) == 255
    for results, prepared in made:
        _submit(gpu, prepared)
    for j, (results, prepared) in enumerate(made):
        assert _read(gpu, results, prepared) == [10 * j + i for i in range(4)], j


HELD_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: u32 }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: v, type: u32 }
"""
HELD_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, params.v + x_get(i));
}
"""


def test_a_repeat_run_binding_its_unwritten_params_slot_again_sees_its_params_after_anything_else(gpu):
    """An immediate repeat run (a GPU buffer input: not a deferred one-shot) with the very same
    params binds the slot it wrote last time without writing it again; any run that takes a
    slot in between (other params, a batch, a prepared run) makes the next repeat write
    afresh. Every output is checked, in every order."""
    key = "adv/ring_held"
    variant = abi.program(key=key, schema=abi.parse(HELD_YAML, f"{key}/bindings.yaml"), wgsl=HELD_WGSL, wgsl_path=f"{key}/kernel.wgsl").variant()
    x = gpu.device.create_buffer_with_data(data=np.arange(4, dtype=np.uint32), usage=wgpu.BufferUsage.STORAGE)
    same = {"v": 5}

    def run(params):
        return variant.run(4, inputs={"x": x}, params=params)

    def prepared_run(v):
        results = gpu.device.create_buffer(size=256, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        return results, variant.prepare(4, inputs={"x": x}, params={"v": v}, results=results)

    runs = [(run(same), 5) for _ in range(3)]
    runs.append((run({"v": 9}), 9))  # another slot, other bytes
    runs += [(run(same), 5) for _ in range(2)]
    with abi.batch():
        runs += [(run({"v": 40 + j}), 40 + j) for j in range(3)]
    runs += [(run(same), 5) for _ in range(2)]
    results, prepared = prepared_run(70)
    runs += [(run(same), 5) for _ in range(2)]
    _submit(gpu, prepared)
    assert _read(gpu, results, prepared) == [70, 71, 72, 73]
    runs += [(run(same), 5) for _ in range(2)]
    # Prepared runs do not replace the repeat state: 300 of them (submitted as they go) wrap
    # the ring over the slot the repeat left its params in, with other params.
    for j in range(300):
        results, prepared = prepared_run(500 + j)
        _submit(gpu, prepared)
    runs.append((run(same), 5))
    assert _read(gpu, results, prepared) == [799, 800, 801, 802]
    for out, v in runs:
        assert abi.read(out.outputs["out"]).tolist() == [v + i for i in range(4)]


def _held_variant(gpu, key):
    variant = abi.program(key=key, schema=abi.parse(HELD_YAML, f"{key}/bindings.yaml"), wgsl=HELD_WGSL, wgsl_path=f"{key}/kernel.wgsl").variant()
    x = gpu.device.create_buffer_with_data(data=np.zeros(4, dtype=np.uint32), usage=wgpu.BufferUsage.STORAGE)
    return lambda v: variant.run(4, inputs={"x": x}, params={"v": v})


def test_a_slot_another_threads_open_batch_staged_is_never_handed_out_before_it_is_written(gpu):
    """Thread B's open batch stages its params in slot k (written when it flushes); this
    thread's runs wrap the ring meanwhile. None of them may take k: a repeat that wrote k and
    kept it as its held slot would then bind B's params (found by review)."""
    import threading

    run = _held_variant(gpu, "adv/ring_staged_race")
    recorded, go, out = threading.Event(), threading.Event(), {}

    def other():
        with abi.batch(slices=False):
            out["b"] = run(1000)
            recorded.set()
            go.wait(30)

    t = threading.Thread(target=other)
    t.start()
    recorded.wait(30)
    mine = [(run(j), j) for j in range(254)]
    mine += [(run(5), 5), (run(5), 5)]
    go.set()
    t.join(30)
    mine.append((run(5), 5))
    for r, v in mine:
        assert abi.read(r.outputs["out"]).tolist() == [v] * 4
    assert abi.read(out["b"].outputs["out"]).tolist() == [1000] * 4


def test_an_open_batch_never_stages_two_runs_in_one_slot_when_other_threads_wrap_the_ring(gpu):
    import threading

    run = _held_variant(gpu, "adv/ring_staged_twice")
    first, go, outs = threading.Event(), threading.Event(), []

    def other():
        with abi.batch(slices=False):
            outs.append(run(1000))
            first.set()
            go.wait(30)
            outs.append(run(2000))

    t = threading.Thread(target=other)
    t.start()
    first.wait(30)
    for j in range(255):
        run(j)
    go.set()
    t.join(30)
    assert [abi.read(o.outputs["out"]).tolist() for o in outs] == [[1000] * 4, [2000] * 4]


def test_a_run_stays_an_ordinary_object_users_can_reference_weakly_and_tag(gpu):
    import weakref

    run = _held_variant(gpu, "adv/run_object")(3)
    ref = weakref.ref(run)
    run.tag = "mine"  # type: ignore[attr-defined]
    assert ref() is run and run.tag == "mine"
