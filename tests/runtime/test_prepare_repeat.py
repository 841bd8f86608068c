"""The prepare repeat path (an engine product preparing its work list every frame): a prepare
that repeats a checked one reuses what was derived, and answers exactly what the full checks
answer. Checked against a numpy model over random sequences of prepares, on the GPU."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from engine_plugin import abi
from engine_plugin.device.context import get_context
from engine_plugin.errors import DispatchError
from engine_plugin.runtime.submission import Submission

pytestmark = pytest.mark.gpu

# y[i] = a * src[items[i]] + b over the n work items; a whole-dispatch output the size of the
# params' count k (k <= n): z[j] = k + j (a count from params, placed after y).
GATHER_YAML = """\
bindings:
  - { name: items, kind: buffer, access: read, element: u32 }
  - { name: src,   kind: buffer, access: read, element: f32 }
  - { name: y,     kind: buffer, access: read_write, element: f32, count: "n" }
  - { name: z,     kind: buffer, access: read_write, element: u32, count: "k" }
params:
  - { name: a, type: f32 }
  - { name: b, type: f32 }
  - { name: k, type: u32 }
"""
GATHER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i < zero_n()) { y_set(i, params.a * src_get(items_get(i)) + params.b); }
    if (i < z_len()) { z_set(i, params.k + i); }
}
"""

STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST


def _variant(key: str):
    schema = abi.parse(GATHER_YAML, f"{key}/bindings.yaml")
    return abi.program(key=key, schema=schema, wgsl=GATHER_WGSL, wgsl_path=f"{key}/kernel.wgsl").variant()


def _submit(ctx, prepared) -> None:
    sub = Submission()
    for record in prepared.records:
        sub.add(record)
    sub.submit(ctx.device, ctx.queue, ctx.guard, "test")
    prepared.submitted()


def _read(ctx, area, placed, n, dtype):
    words = np.frombuffer(ctx.queue.read_buffer(area), dtype)
    return words[placed.offset // 4 : placed.offset // 4 + n]


@pytest.mark.parametrize("seed", range(4))
def test_prepares_repeating_checked_ones_answer_what_the_full_checks_answer(seed, monkeypatch):
    ctx = get_context()
    variant = _variant(f"t15/gather_model{seed}")
    full = []
    real = type(variant)._prepare
    monkeypatch.setattr(type(variant), "_prepare", lambda self, *a: full.append(1) or real(self, *a))
    rng = np.random.default_rng(seed)
    # Eighths: a * x + b is exact in f32 whether or not the adapter fuses it into one fma
    # (the H200 does, lavapipe does not), so equality with numpy is the test on any adapter.
    host = [(rng.integers(-8192, 8192, 256) / 8).astype(np.float32) for _ in range(2)]
    srcs = [ctx.device.create_buffer_with_data(data=h, usage=STORAGE) for h in host]
    areas = [ctx.device.create_buffer(size=4096, usage=STORAGE) for _ in range(2)]
    inputs_of_area: list[dict] = [{}, {}]
    params_kept = {"a": 2.0, "b": 0.5, "k": 3}
    made = 0
    for step in range(60):
        area_k = int(rng.integers(2))
        src_k = int(rng.integers(2))
        n = int(rng.choice([4, 7, 64, 65, 100]))  # >= k: the entry point runs n invocations
        items = rng.integers(0, 256, size=n).astype(np.uint32)
        if rng.random() < 0.2:
            items = items.astype(np.int64)  # another dtype: converted on upload, the full path each time
        choice = rng.random()
        if choice < 0.15:
            params_kept = {"a": float(rng.integers(1, 4)), "b": 0.5, "k": int(rng.integers(1, 5))}  # a new dict
        elif choice < 0.25:
            params_kept["b"] = float(rng.integers(0, 3))  # the same dict, changed in place
        elif choice < 0.3:
            params_kept["a"] = np.float32(rng.integers(1, 4))  # a numpy value
        inputs = inputs_of_area[area_k]
        inputs.clear()  # the same dict object, refilled (the engine makes a new one each time)
        inputs.update(items=items, src=srcs[src_k])
        prepared = variant.prepare(n, inputs, dict(params_kept) if rng.random() < 0.5 else params_kept, results=areas[area_k])
        made += 1
        area = areas[area_k]
        _submit(ctx, prepared)
        a, b, k = np.float32(params_kept["a"]), np.float32(params_kept["b"]), int(params_kept["k"])
        want_y = a * host[src_k][items.astype(np.int64)] + b
        np.testing.assert_array_equal(_read(ctx, area, prepared.layout["y"], n, np.float32), want_y, err_msg=f"step {step}")
        np.testing.assert_array_equal(_read(ctx, area, prepared.layout["z"], k, np.uint32), k + np.arange(k, dtype=np.uint32), err_msg=f"step {step}")
        assert prepared.layout["y"].capacity == n and prepared.layout["z"].capacity == k
    assert len(full) < made  # some prepares repeated a checked one (else this test checks nothing new)


def test_a_repeat_is_refused_where_the_full_checks_refuse():
    # A results area too small for a larger n: the repeat of a smaller n must not hide that.
    ctx = get_context()
    variant = _variant("t15/gather_refused")
    src = ctx.device.create_buffer_with_data(data=np.ones(64, np.float32), usage=STORAGE)
    area = ctx.device.create_buffer(size=512, usage=STORAGE)
    params = {"a": 1.0, "b": 0.0, "k": 1}
    for _ in range(2):
        _submit(ctx, variant.prepare(8, {"items": np.zeros(8, np.uint32), "src": src}, params, results=area))
    with pytest.raises(DispatchError, match="results area"):
        variant.prepare(200, {"items": np.zeros(200, np.uint32), "src": src}, params, results=area)
    with pytest.raises(DispatchError, match="unknown input"):
        variant.prepare(8, {"items": np.zeros(8, np.uint32), "src": src, "extra": src}, params, results=area)
    with pytest.raises(DispatchError):
        variant.prepare(8, {"items": np.zeros(8, np.uint32), "src": src}, {"a": 1.0, "b": 0.0}, results=area)  # k missing


def test_a_released_products_results_area_is_forgotten():
    ctx = get_context()
    variant = _variant("t15/gather_forget")
    src = ctx.device.create_buffer_with_data(data=np.ones(64, np.float32), usage=STORAGE)
    areas = [ctx.device.create_buffer(size=1024, usage=STORAGE) for _ in range(2)]
    for area in areas:
        _submit(ctx, variant.prepare(8, {"items": np.zeros(8, np.uint32), "src": src}, {"a": 1.0, "b": 0.0, "k": 1}, results=area))
    variant.forget_placed(areas[0])
    assert [p.results for p in variant._placed.values()] == [areas[1]]


def test_params_as_pairs_prepare_as_before_and_leak_no_pool_buffer():
    # Review helper 42: the repeat path called params.items(): a list of pairs (which the full
    # checks take) raised AttributeError after the upload was taken, one pool buffer lost a call.
    ctx = get_context()
    variant = _variant("t15/gather_pairs")
    src = ctx.device.create_buffer_with_data(data=np.arange(64, dtype=np.float32), usage=STORAGE)
    area = ctx.device.create_buffer(size=1024, usage=STORAGE)
    created = variant._pool.created
    for _ in range(10):
        prepared = variant.prepare(8, {"items": np.arange(8, dtype=np.uint32), "src": src}, [("a", 2.0), ("b", 1.0), ("k", 1)], results=area)
        _submit(ctx, prepared)
        np.testing.assert_array_equal(_read(ctx, area, prepared.layout["y"], 8, np.float32), 2.0 * np.arange(8, dtype=np.float32) + 1.0)
    assert variant._pool.created - created <= 1


def test_a_refused_prepare_gives_its_uploads_back():
    ctx = get_context()
    variant = _variant("t15/gather_refused_pool")
    src = ctx.device.create_buffer_with_data(data=np.ones(64, np.float32), usage=STORAGE)
    area = ctx.device.create_buffer(size=1024, usage=STORAGE)
    held = [variant.prepare(8, {"items": np.zeros(8, np.uint32), "src": src}, {"a": 1.0, "b": 0.0, "k": 1}, results=area) for _ in range(variant._ring.slots - 2)]
    ring = variant._ring
    ring.staged.update(k * ring.stride for k in range(ring.slots) if k * ring.stride not in ring.reserved)  # the free slots: an open batch's
    created = variant._pool.created
    for _ in range(5):
        with pytest.raises(DispatchError):
            variant.prepare(8, {"items": np.zeros(8, np.uint32), "src": src}, {"a": 1.0, "b": 0.0, "k": 1}, results=area)
    variant._ring.staged.clear()
    assert variant._pool.created - created <= 1
    for prepared in held:
        prepared.submitted()


def test_a_remembered_prepare_does_not_keep_its_first_work_list_alive():
    import gc
    import weakref

    ctx = get_context()
    variant = _variant("t15/gather_keep")
    src = ctx.device.create_buffer_with_data(data=np.ones(64, np.float32), usage=STORAGE)
    area = ctx.device.create_buffer(size=4096, usage=STORAGE)
    first = np.zeros(8, np.uint32)
    ref = weakref.ref(first)
    _submit(ctx, variant.prepare(8, {"items": first, "src": src}, {"a": 1.0, "b": 0.0, "k": 1}, results=area))
    del first
    for _ in range(3):
        _submit(ctx, variant.prepare(8, {"items": np.zeros(8, np.uint32), "src": src}, {"a": 1.0, "b": 0.0, "k": 1}, results=area))
    gc.collect()
    assert ref() is None


def test_a_prepare_repeat_refuses_an_input_whose_writing_run_was_dropped_unsubmitted(monkeypatch):
    # Review helper 219: the full prepare refuses an input that holds no result (the batch run
    # writing it was dropped while the batch submitted), but the prepare repeat bound it and
    # the kernel read its old bytes.
    import importlib

    batch_module = importlib.import_module("engine_plugin.runtime.batch")
    ctx = get_context()
    variant = _variant("t15/gather_voided")
    writer = abi.program(
        key="t15/voided_writer",
        schema=abi.parse('bindings:\n  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }\n'),
        wgsl="@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    out_set(i, 100.0);\n}\n",
    ).variant()
    src = ctx.device.create_buffer_with_data(data=np.full(64, 7, np.float32), usage=STORAGE)
    area = ctx.device.create_buffer(size=4096, usage=STORAGE)
    items = np.arange(8, dtype=np.uint32)
    params = {"a": 1.0, "b": 0.0, "k": 0}
    first = variant.prepare(8, {"items": items, "src": src}, params, results=area)
    _submit(ctx, first)  # checked in full, remembered
    np.testing.assert_array_equal(_read(ctx, area, first.layout["y"], 8, np.float32), 7.0)

    def fail(*args, **kwargs):
        raise RuntimeError("an error while the batch submitted")

    monkeypatch.setattr(batch_module, "submit_records", fail)
    with pytest.raises(RuntimeError), abi.batch():
        writer.run(8, outputs={"out": src})
    monkeypatch.undo()
    assert batch_module.unsubmitted(src) is not None
    with pytest.raises(DispatchError, match=r"holds no result"):
        variant.prepare(8, {"items": items, "src": src}, params, results=area)


@pytest.mark.parametrize("case", ["destroyed", "pending_destroy", "mapped", "no_copy_dst", "not_a_buffer"])
def test_a_results_area_a_submission_cannot_use_is_refused_by_prepare(case):
    # Review helper 219: prepare never looked at its results area. A destroyed one (or one whose
    # destroy() waited on an unsubmitted prepared run) or a still-mapped one aborted the process
    # at the submission; a wrong usage raised wgpu's bare validation error.
    ctx = get_context()
    variant = _variant(f"t15/gather_area_{case}")
    src = ctx.device.create_buffer_with_data(data=np.arange(64, dtype=np.float32), usage=STORAGE)
    items = np.arange(8, dtype=np.uint32)
    params = {"a": 1.0, "b": 0.0, "k": 0}
    pending = None
    if case == "no_copy_dst":
        area = ctx.device.create_buffer(size=4096, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC, label="area")
    elif case == "mapped":
        area = ctx.device.create_buffer(size=4096, usage=STORAGE, mapped_at_creation=True, label="area")
    elif case == "not_a_buffer":
        area = np.zeros(1024, np.float32)
    else:
        area = ctx.device.create_buffer(size=4096, usage=STORAGE, label="area")
        if case == "pending_destroy":
            pending = variant.prepare(8, {"items": items, "src": src}, params, results=area)
        area.destroy()  # (pending: waits for that prepared run)
    with pytest.raises(DispatchError, match=r"results") as info:
        variant.prepare(8, {"items": items, "src": src}, params, results=area)
    assert "t15/gather_area" in str(info.value)
    if pending is not None:
        _submit(ctx, pending)  # the run prepared before the destroy still runs; nothing aborts
    if case == "mapped":
        area.unmap()


def test_prepared_runs_dropped_unsubmitted_give_their_params_slots_back():
    # Review helper 219: a PreparedRun dropped without submitted() kept its params slot (and
    # its uploads) for good: after 255 drops every prepare of the variant was refused.
    import gc

    ctx = get_context()
    variant = _variant("t15/gather_dropped")
    src = ctx.device.create_buffer_with_data(data=np.arange(64, dtype=np.float32), usage=STORAGE)
    area = ctx.device.create_buffer(size=4096, usage=STORAGE)
    for step in range(300):
        params = {"a": float(step), "b": 0.0, "k": 0}
        variant.prepare(8, {"items": np.arange(8, dtype=np.uint32), "src": src}, params, results=area)  # dropped at once
    gc.collect()
    kept = variant.prepare(8, {"items": np.arange(8, dtype=np.uint32), "src": src}, {"a": 3.0, "b": 1.0, "k": 0}, results=area)
    _submit(ctx, kept)
    np.testing.assert_array_equal(_read(ctx, area, kept.layout["y"], 8, np.float32), 3.0 * np.arange(8, dtype=np.float32) + 1.0)
