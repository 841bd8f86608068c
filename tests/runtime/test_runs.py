"""variant.run semantics on the real GPU: append, live counts, chaining, tables, bits, folding, pooling."""

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.lowering import geometry
from engine_plugin.runtime.buffers import pool_for

from runtime_kernels import AXPY_WGSL, AXPY_YAML, DOUBLE_LIVE_WGSL, DOUBLE_LIVE_YAML, FILTER_WGSL, FILTER_YAML, INDEX_WGSL, INDEX_YAML, make


def test_float_order_append_keeps_a_data_dependent_subset():
    variant = make("t/filter", FILTER_YAML, FILTER_WGSL)
    rng = np.random.default_rng(3)
    src = rng.uniform(0, 1, 4096).astype(np.float32)
    run = variant.run(n=src.size, inputs={"src": src}, params={"threshold": 0.7, "cap": 4096})
    hits = run.outputs["hits"]
    want = np.sort(src[src > 0.7])
    assert hits.count == want.size and hits.overflow is None
    np.testing.assert_array_equal(np.sort(abi.read(hits)), want)


def test_append_past_capacity_reports_the_attempted_count_and_writes_nothing_out_of_bounds(gpu):
    import wgpu

    variant = make("t/filter", FILTER_YAML, FILTER_WGSL)
    src = np.arange(1, 201, dtype=np.float32)  # 200 values, all above the threshold
    sentinel = np.full(64, 12345.0, dtype=np.float32)
    buf = gpu.device.create_buffer_with_data(data=sentinel, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    run = variant.run(n=200, inputs={"src": src}, params={"threshold": 0.0, "cap": 16}, outputs={"hits": {"buffer": buf, "capacity": 16}})
    hits = run.outputs["hits"]
    assert hits.overflow == 200
    assert hits.count == 16 and hits.capacity == 16
    assert set(abi.read(hits).tolist()) <= set(src.tolist())
    words = abi.read(buf)
    np.testing.assert_array_equal(words[16:], sentinel[16:])  # past capacity: untouched


def test_second_kernel_runs_over_the_live_count_of_an_append_output_on_the_gpu():
    first = make("t/filter", FILTER_YAML, FILTER_WGSL)
    second = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    rng = np.random.default_rng(4)
    src = rng.uniform(0, 1, 1000).astype(np.float32)
    hits = first.run(n=1000, inputs={"src": src}, params={"threshold": 0.5, "cap": 1000}).outputs["hits"]
    run = second.run(inputs={"src": hits}, domain_count=hits)  # n defaults to the capacity
    assert run.n == 1000
    doubled = run.outputs["dst"]
    assert doubled.count == int((src > 0.5).sum())  # live, read from the counter
    np.testing.assert_array_equal(np.sort(abi.read(doubled)), np.sort(src[src > 0.5] * 2))


def test_domain_count_given_as_an_int_bounds_zero_n():
    second = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    src = np.arange(10, dtype=np.float32)
    run = second.run(n=10, inputs={"src": src}, domain_count=4)
    out = abi.read(run.outputs["dst"])
    # The live output reports the count its dispatch ran over: 4 elements, not n.
    assert run.outputs["dst"].count == 4
    np.testing.assert_array_equal(out, src[:4] * 2)


TABLE_YAML = """\
bindings:
  - { name: cols, kind: columns, access: read }
  - { name: fo, kind: buffer, access: read_write, element: f32, count: "n * 3" }
  - { name: io, kind: buffer, access: read_write, element: i32, count: "n * 3" }
  - { name: uo, kind: buffer, access: read_write, element: u32, count: "n * 3" }
  - { name: vo, kind: buffer, access: read_write, element: vec2<f32>, count: "n" }
"""
TABLE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    for (var c = 0u; c < 3u; c++) {
        fo_set(i * 3u + c, cols_f32(c, i, 0u));
        io_set(i * 3u + c, cols_i32(c, i, 0u));
        uo_set(i * 3u + c, cols_u32(c, i, 0u));
    }
    vo_set(i, cols_vec2(cols_col_pos, i));
}
"""


def test_table_columns_of_mixed_kinds_convert_by_value():
    schema = abi.parse(TABLE_YAML, "t/table/bindings.yaml")
    program = abi.program(key="t/table", schema=schema, wgsl=TABLE_WGSL)
    variant = program.variant(columns={"cols": ["f", "i", "u", "pos"]})
    n = 50
    f = np.linspace(-3.5, 7.25, n).astype(np.float32)
    i = np.arange(-25, 25, dtype=np.int32)
    u = np.arange(1000, 1000 + n, dtype=np.uint32)
    pos = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float64)  # f64 packs as f32
    t = abi.table({"f": f, "i": i, "u": u, "pos": pos}, order=["f", "i", "u", "pos"])
    run = variant.run(n=n, inputs={"cols": t})
    fo = abi.read(run.outputs["fo"]).reshape(n, 3)
    io = abi.read(run.outputs["io"]).reshape(n, 3)
    uo = abi.read(run.outputs["uo"]).reshape(n, 3)
    np.testing.assert_array_equal(fo, np.stack([f, i.astype(np.float32), u.astype(np.float32)], 1))
    np.testing.assert_array_equal(io[:, 0], f.astype(np.int32))  # truncation toward zero
    np.testing.assert_array_equal(io[:, 1:], np.stack([i, u.astype(np.int32)], 1))
    # negative i32 read as u32: by value, saturating at 0 (not wrapped to 2**32 - 25)
    np.testing.assert_array_equal(uo[:, 1:], np.stack([np.maximum(i, 0).astype(np.uint32), u], 1))
    np.testing.assert_array_equal(abi.read(run.outputs["vo"]), pos.astype(np.float32))


TABLE_RW_YAML = """\
bindings:
  - { name: cols, kind: columns, access: read_write }
  - { name: io, kind: buffer, access: read_write, element: i32, count: "n" }
  - { name: uo, kind: buffer, access: read_write, element: u32, count: "n" }
"""
TABLE_RW_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    io_set(i, cols_i32(cols_col_u, i, 0u));
    uo_set(i, cols_u32(cols_col_i, i, 0u));
    cols_set_u32(cols_col_i2, i, 0u, cols_u32(cols_col_u, i, 0u));
    cols_set_i32(cols_col_u2, i, 0u, cols_i32(cols_col_i, i, 0u));
}
"""


def test_table_accessors_between_i32_and_u32_saturate_as_a_chained_cast_does():
    # SPEC: table accessors convert "by value from the stored kind", the rule a chained
    # Output of another int type follows (runtime.convert): out of range clamps, never wraps.
    program = abi.program(key="t/table_sat", schema=abi.parse(TABLE_RW_YAML, "t/table_sat/bindings.yaml"), wgsl=TABLE_RW_WGSL)
    variant = program.variant(columns={"cols": ["i", "u", "i2", "u2"]})
    i = np.array([-(2**31), -7, 0, 5, 2**31 - 1], np.int32)
    u = np.array([0, 7, 2**31 - 1, 2**31, 2**32 - 1], np.uint32)
    t = abi.table({"i": i, "u": u, "i2": np.zeros(5, np.int32), "u2": np.zeros(5, np.uint32)}, order=["i", "u", "i2", "u2"])
    run = variant.run(n=5, inputs={"cols": t})
    want_i = np.minimum(u, 2**31 - 1).astype(np.int32)
    want_u = np.maximum(i, 0).astype(np.uint32)
    np.testing.assert_array_equal(abi.read(run.outputs["io"]), want_i)
    np.testing.assert_array_equal(abi.read(run.outputs["uo"]), want_u)
    cols = abi.read(t)
    np.testing.assert_array_equal(cols["i2"], want_i)  # u32 values set into an i32 column
    np.testing.assert_array_equal(cols["u2"], want_u)  # i32 values set into a u32 column


def test_a_table_packed_in_another_column_order_is_refused():
    from engine_plugin.errors import DispatchError

    schema = abi.parse(TABLE_YAML, "t/table/bindings.yaml")
    variant = abi.program(key="t/table", schema=schema, wgsl=TABLE_WGSL).variant(columns={"cols": ["f", "i", "u", "pos"]})
    t = abi.table({"i": np.zeros(4, np.int32), "f": np.zeros(4, np.float32), "u": np.zeros(4, np.uint32), "pos": np.zeros((4, 2))})
    with pytest.raises(DispatchError, match=r"order=\['f', 'i', 'u', 'pos'\]"):
        variant.run(n=4, inputs={"cols": t})


def test_table_header_layout_is_count_then_first_lanes_count_kind():
    t = abi.table({"a": np.zeros(3, np.float32), "b": np.zeros((2, 4), np.int32)})
    words = abi.read(t.buffer, as_u32=True)
    assert words[0] == 2
    assert list(words[1:5]) == [9, 1, 3, 0]
    assert list(words[5:9]) == [12, 4, 2, 1]


BITS_YAML = """\
bindings:
  - { name: raw, kind: buffer, access: read, element: u32, bits: true }
  - { name: val, kind: buffer, access: read, element: f32 }
  - { name: out_raw, kind: buffer, access: read_write, element: u32, count: "len(raw)" }
  - { name: out_val, kind: buffer, access: read_write, element: f32, count: "len(val)" }
"""
BITS_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_raw_set(i, raw_get(i));
    out_val_set(i, val_get(i));
}
"""


def test_bits_binding_passes_raw_words_and_a_plain_binding_casts_by_value():
    variant = make("t/bits", BITS_YAML, BITS_WGSL)
    floats = np.array([1.0, -2.5, 3.25, 0.0], dtype=np.float32)
    ints = np.array([7, -8, 9, 10], dtype=np.int32)
    run = variant.run(n=4, inputs={"raw": floats, "val": ints})
    np.testing.assert_array_equal(abi.read(run.outputs["out_raw"]), floats.view(np.uint32))
    np.testing.assert_array_equal(abi.read(run.outputs["out_val"]), ints.astype(np.float32))


def test_dispatch_folds_into_y_past_the_per_dimension_limit(gpu, monkeypatch):
    # launch every logical group (no grid-stride cap), so the fold itself is what runs
    monkeypatch.setitem(geometry.INVOCATION_BUDGET, "cpu", 1 << 40)
    monkeypatch.setitem(geometry.INVOCATION_BUDGET, "gpu", 1 << 40)
    gpu.cache("group_cap")
    monkeypatch.setitem(gpu._caches, "group_cap", {})  # caps computed from the budget above, for this test only
    variant = make("t/index", INDEX_YAML, INDEX_WGSL)
    limit = gpu.limit("max-compute-workgroups-per-dimension")
    n = limit + 1000
    run = variant.run(n=n)
    # a tight fold: two rows of half the groups each, not a full row and a nearly empty one
    assert run.groups[1] == 2 and run.groups[0] == -(-n // 2) and run.groups[0] <= limit
    out = abi.read(run.outputs["dst"])
    np.testing.assert_array_equal(out, np.arange(n, dtype=np.uint32))


def test_repeated_runs_reuse_pooled_outputs_instead_of_allocating(gpu):
    variant = make("t/index", INDEX_YAML, INDEX_WGSL)
    pool = pool_for(gpu)
    for _ in range(3):
        variant.run(n=1000)
    created = pool.created
    for _ in range(50):
        run = variant.run(n=1000)
        del run
    assert pool.created == created
    kept = [variant.run(n=1000) for _ in range(3)]  # held outputs are never handed out twice
    buffers = {id(r.outputs["dst"].buffer) for r in kept}
    assert len(buffers) == 3


def test_an_output_held_by_the_caller_is_not_overwritten_by_later_runs():
    variant = make("t/index", INDEX_YAML, INDEX_WGSL)
    first = variant.run(n=100)
    for _ in range(5):
        variant.run(n=100)
    np.testing.assert_array_equal(abi.read(first.outputs["dst"]), np.arange(100, dtype=np.uint32))


def test_a_hundred_runs_in_one_batch_all_complete_with_their_own_params():
    variant = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    src = np.arange(64, dtype=np.float32)
    with abi.batch():
        runs = [variant.run(n=k + 1, inputs={"src": src}) for k in range(64)]
    for k, run in enumerate(runs):
        np.testing.assert_array_equal(abi.read(run.outputs["dst"]), src[: k + 1] * 2)


def test_runs_in_a_batch_sharing_params_bytes_each_read_their_own_params():
    # A batch stages a run's params only when they differ from the variant's last run's in
    # it; A, A, B, A (repeat path, full path, an array mutated in place) must each read theirs.
    from runtime_kernels import AXPY_WGSL, AXPY_YAML

    variant = make("t/axpy_batch_params", AXPY_YAML, AXPY_WGSL)
    x = np.arange(32, dtype=np.float32)
    a = np.array(3.0, np.float32)
    plan = [2.0, 2.0, 5.0, 2.0, a, a, "mutate", a, 2.0, 2.0]
    with abi.batch():
        runs, want = [], []
        for step in plan:
            if isinstance(step, str):
                a[...] = 7.0  # the same object, new contents: its earlier runs keep 3.0
                continue
            runs.append(variant.run(n=32, inputs={"x": x}, params={"a": step}))
            want.append(float(step) * x + 1.0)
        for k in range(300):  # past the params ring: the slot is reused and flushed correctly
            runs.append(variant.run(n=32, inputs={"x": x}, params={"a": float(k % 3)}))
            want.append(float(k % 3) * x + 1.0)
    for run, expected in zip(runs, want):
        np.testing.assert_array_equal(abi.read(run.outputs["y"]), expected)


def test_compile_answers_a_dispatch_key_and_compiles_the_same_source_once():
    from engine_plugin.runtime import compile_count

    schema = abi.parse(INDEX_YAML, "t/index2/bindings.yaml")
    lowered = abi.lower(schema, INDEX_WGSL + "\n// unique 2\n")
    before = compile_count()
    key = abi.compile("t/index2", lowered)
    assert abi.compile("another key", abi.lower(schema, INDEX_WGSL + "\n// unique 2\n")) == key
    assert compile_count() == before + 1


def test_chaining_an_output_into_the_next_kernel_needs_no_cpu_round_trip():
    variant = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    src = np.arange(10, dtype=np.float32)
    once = variant.run(n=10, inputs={"src": src}).outputs["dst"]
    twice = variant.run(n=10, inputs={"src": once}).outputs["dst"]
    np.testing.assert_array_equal(abi.read(twice), src * 4)


def test_a_batch_longer_than_the_params_ring_keeps_every_runs_own_params():
    variant = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    src = np.arange(700, dtype=np.float32)
    with abi.batch():
        runs = [variant.run(n=k + 1, inputs={"src": src}) for k in range(600)]
    for k in (0, 254, 255, 256, 511, 599):
        got = abi.read(runs[k].outputs["dst"])
        assert got.shape == (k + 1,)
        np.testing.assert_array_equal(got, src[: k + 1] * 2)


def test_a_repeated_call_with_the_same_buffers_reuses_its_checks_but_not_its_outputs(gpu):
    import wgpu

    variant = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    buf = gpu.device.create_buffer_with_data(data=np.arange(32, dtype=np.float32), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC)
    first = variant.run(n=32, inputs={"src": buf})
    second = variant.run(n=32, inputs={"src": buf})  # the repeat path
    assert first.outputs["dst"].buffer is not second.outputs["dst"].buffer  # both held: distinct outputs
    gpu.queue.write_buffer(buf, 0, np.full(32, 5.0, np.float32))  # new contents, same buffer
    third = variant.run(n=32, inputs={"src": buf})
    np.testing.assert_array_equal(abi.read(first.outputs["dst"]), np.arange(32, dtype=np.float32) * 2)
    np.testing.assert_array_equal(abi.read(third.outputs["dst"]), np.full(32, 10.0, np.float32))
    smaller = variant.run(n=16, inputs={"src": buf})  # a different n is checked afresh
    assert smaller.outputs["dst"].count == 16


PARAM_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: shift, type: vec2<f32> }
"""
PARAM_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) + params.shift.x);
}
"""


def test_params_mutated_in_place_between_two_identical_calls_are_seen(gpu):
    import wgpu

    variant = make("t/param_off", PARAM_YAML, PARAM_WGSL)
    buf = gpu.device.create_buffer_with_data(data=np.zeros(8, np.float32), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    off = np.array([1.0, 0.0], np.float32)
    first = variant.run(n=8, inputs={"src": buf}, params={"shift": off})
    off[0] = 5.0
    second = variant.run(n=8, inputs={"src": buf}, params={"shift": off})
    np.testing.assert_array_equal(abi.read(first.outputs["dst"]), np.full(8, 1.0, np.float32))
    np.testing.assert_array_equal(abi.read(second.outputs["dst"]), np.full(8, 5.0, np.float32))


def test_a_chained_output_of_another_scalar_type_is_cast_by_value_on_the_gpu():
    bits = make("t/bits", BITS_YAML, BITS_WGSL)
    u32_out = make("t/index", INDEX_YAML, INDEX_WGSL).run(n=4).outputs["dst"]  # 0, 1, 2, 3 as u32
    run = bits.run(n=4, inputs={"raw": np.zeros(4, np.float32), "val": u32_out})
    np.testing.assert_array_equal(abi.read(run.outputs["out_val"]), np.arange(4, dtype=np.float32))
    # a bits: true binding takes the words as they are
    raw = bits.run(n=4, inputs={"raw": u32_out, "val": np.zeros(4, np.float32)}).outputs["out_raw"]
    np.testing.assert_array_equal(abi.read(raw), np.arange(4, dtype=np.uint32))
    i32_in = abi.parse("bindings:\n  - { name: x, kind: buffer, access: read, element: i32 }\n  - { name: y, kind: buffer, access: read_write, element: i32, count: 'len(x)' }\nworkgroup: 1\n")
    chained = abi.program(key="t/i32in", schema=i32_in, wgsl=INDEX_WGSL.replace("dst_set(i, i)", "y_set(i, x_get(i))")).variant()
    src = np.array([1.5, -2.7, 3e9, -3e9], np.float32)
    f32_out = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL).run(n=4, inputs={"src": src}).outputs["dst"]
    got = abi.read(chained.run(n=4, inputs={"x": f32_out}).outputs["y"])
    # by value, truncating toward zero; out-of-range values saturate to the largest f32 inside
    # the i32 range (WGSL's conversion: 2**31 - 128)
    np.testing.assert_array_equal(got, np.array([3, -5, 2**31 - 128, -(2**31)], np.int32))


def test_a_repeated_numpy_input_is_uploaded_afresh_whatever_its_layout():
    """The repeat path writes a numpy input as it is when it is C-contiguous in the binding's
    own dtype; any other layout of the same dtype and shape (a strided view, a transposed
    grid) goes through the general conversion. Every run sees its own values."""
    from runtime_kernels import AXPY_WGSL, AXPY_YAML

    variant = make("t/axpy_repeat_upload", AXPY_YAML, AXPY_WGSL)
    rng = np.random.default_rng(11)
    n = 256
    # Eighths: 3 * x + 1 is exact in f32 whether or not the adapter fuses it into one fma.
    big = (rng.integers(-8192, 8192, 2 * n) / 8).astype(np.float32)
    cases = [
        (rng.integers(-8192, 8192, n) / 8).astype(np.float32),  # contiguous: written as it is
        big[::2],  # strided view, same dtype and shape
        (rng.integers(-8192, 8192, n) / 8).astype(np.float32),
        big[1::2],
        np.ascontiguousarray(big[:n]),
    ]
    for x in cases * 2:
        got = abi.read(variant.run(n, inputs={"x": x}, params={"a": 3.0}).outputs["y"])
        np.testing.assert_array_equal(got, np.float32(3.0) * x + np.float32(1.0))


def test_abi_read_answers_an_array_of_its_own():
    """abi.read's array owns its memory: writeable, and a later read or run never changes it."""
    from runtime_kernels import AXPY_WGSL, AXPY_YAML

    variant = make("t/axpy_read_owned", AXPY_YAML, AXPY_WGSL)
    x = np.arange(64, dtype=np.float32)
    y = variant.run(64, inputs={"x": x}, params={"a": 2.0}).outputs["y"]
    first, second = abi.read(y), abi.read(y)
    assert first.flags.writeable and first.flags.owndata
    first.resize(128, refcheck=False)  # its own memory (review: a view of the read's bytes could not)
    first[:] = -1
    np.testing.assert_array_equal(second, 2 * x + 1)
    np.testing.assert_array_equal(abi.read(y), 2 * x + 1)
    abi.read(variant.run(64, inputs={"x": x + 5}, params={"a": 2.0}).outputs["y"])
    np.testing.assert_array_equal(second, 2 * x + 1)
    empty = abi.read(variant.run(0, inputs={"x": x[:0]}, params={"a": 2.0}).outputs["y"])
    assert empty.size == 0 and empty.flags.writeable


def test_an_append_output_given_back_through_outputs_counts_what_the_second_run_appended():
    # Passing an append output back through outputs= keeps its counter (appends continue). Its
    # count, already read before the second run, must not stay the first run's: the Output and
    # every copy of it answer the counter's value now, and chaining it runs over that count.
    import copy

    variant = make("t/filter", FILTER_YAML, FILTER_WGSL)
    src = np.arange(1, 101, dtype=np.float32)
    first = variant.run(n=100, inputs={"src": src}, params={"threshold": 90.0, "cap": 256}).outputs["hits"]
    assert first.count == 10 and first.count_known
    twin = copy.copy(first)
    assert twin.count == 10
    second = variant.run(n=100, inputs={"src": src}, params={"threshold": 50.0, "cap": 256}, outputs={"hits": first}).outputs["hits"]
    want = np.sort(np.concatenate([src[src > 90.0], src[src > 50.0]]))
    assert second.count == 60
    assert not first.count_known
    assert first.count == 60 and twin.count == 60
    np.testing.assert_array_equal(np.sort(abi.read(first)), want)
    np.testing.assert_array_equal(np.sort(abi.read(twin)), want)
    # A third run through the second run's Output: the first one's count follows again.
    variant.run(n=100, inputs={"src": src}, params={"threshold": 95.0, "cap": 256}, outputs={"hits": second})
    assert first.count == 65 and second.count == 65
    doubled = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL).run(inputs={"src": first}, domain_count=first).outputs["dst"]
    assert doubled.count == 65
    # The same call twice (the second takes the repeat path): each appends, each is counted.
    for total in (100, 135):
        variant.run(n=100, inputs={"src": src}, params={"threshold": 65.0, "cap": 256}, outputs={"hits": first})
        assert first.count == total and twin.count == total


def test_a_domain_count_handed_through_inputs_is_the_live_count_as_the_keyword_is():
    # A domain_count binding is named like every other binding: handing it through inputs=
    # must count (it was accepted and ignored: zero_n() stayed n and the live count was wrong).
    from engine_plugin.errors import DispatchError

    second = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    src = np.arange(10, dtype=np.float32)
    by_input = second.run(n=10, inputs={"src": src, "live": 4}).outputs["dst"]
    assert by_input.count == 4
    np.testing.assert_array_equal(abi.read(by_input), src[:4] * 2)
    hits = make("t/filter", FILTER_YAML, FILTER_WGSL).run(n=10, inputs={"src": src}, params={"threshold": 4.5, "cap": 10}).outputs["hits"]
    chained = second.run(inputs={"src": hits, "live": hits}).outputs["dst"]  # n defaults to the capacity
    assert chained.count == 5
    np.testing.assert_array_equal(np.sort(abi.read(chained)), np.sort(src[src > 4.5] * 2))
    with pytest.raises(DispatchError, match="live"):
        second.run(n=10, inputs={"src": src, "live": "junk"})
    with pytest.raises(DispatchError, match="live"):
        second.run(n=10, inputs={"src": src, "live": 3}, domain_count=4)
    same = second.run(n=10, inputs={"src": src, "live": np.int64(4)}, domain_count=4).outputs["dst"]  # the same count twice
    assert same.count == 4


def test_abi_read_of_a_table_answers_its_columns_as_a_kernel_left_them():
    # abi.table answers a Table; abi.read refused it ("takes a GPUBuffer, an Output ...").
    yaml = "bindings:\n  - { name: cols, kind: columns, access: read_write }\n"
    body = (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
        "    cols_set_f32(0u, i, 0u, cols_f32(0u, i, 0u) * 2.0);\n"
        "    cols_set_i32(1u, i, 1u, cols_i32(1u, i, 1u) - 7);\n}\n"
    )
    variant = abi.program(key="t/table_rw", schema=abi.parse(yaml, "t/table_rw/bindings.yaml"), wgsl=body).variant(columns={"cols": ["f", "v"]})
    f = np.linspace(-2.0, 5.0, 12).astype(np.float32)
    v = np.arange(24, dtype=np.int32).reshape(12, 2)
    t = abi.table({"f": f, "v": v}, order=["f", "v"])
    before = abi.read(t)
    assert list(before) == ["f", "v"]
    np.testing.assert_array_equal(before["f"], f)
    np.testing.assert_array_equal(before["v"], v)
    variant.run(n=12, inputs={"cols": t})
    after = abi.read(t)
    np.testing.assert_array_equal(after["f"], f * 2.0)
    np.testing.assert_array_equal(after["v"], np.stack([v[:, 0], v[:, 1] - 7], 1))
    assert after["v"].dtype == np.int32
    words = abi.read(t, as_u32=True)
    assert words.dtype == np.uint32 and words.size == t.words.size and words[0] == 2


def test_abi_read_of_a_table_answers_each_column_in_the_shape_it_was_given():
    # A (n, 1) column is one lane on the GPU; it read back as (n,), which broadcasts
    # silently against the caller's (n, 1) array.
    col = np.arange(6, dtype=np.float32).reshape(6, 1)
    t = abi.table({"a": col, "b": np.arange(6, dtype=np.int32), "c": np.ones((6, 3), np.uint32)}, order=["a", "b", "c"])
    got = abi.read(t)
    assert [got[k].shape for k in "abc"] == [(6, 1), (6,), (6, 3)]
    np.testing.assert_array_equal(got["a"], col)


def test_a_count_read_on_another_thread_while_a_batch_holds_the_append_is_read_again_after_it():
    # The count was read (old value) after the run was recorded in another thread's batch but
    # before that batch was submitted: it must not stay the old value once the batch has run.
    import threading

    variant = make("t/filter", FILTER_YAML, FILTER_WGSL)
    src = np.arange(1, 101, dtype=np.float32)
    first = variant.run(n=100, inputs={"src": src}, params={"threshold": 90.0, "cap": 256}).outputs["hits"]
    assert first.count == 10
    recorded, read_done = threading.Event(), threading.Event()

    def appender() -> None:
        with abi.batch():
            variant.run(n=100, inputs={"src": src}, params={"threshold": 50.0, "cap": 256}, outputs={"hits": first})
            recorded.set()
            read_done.wait(30)

    t = threading.Thread(target=appender)
    t.start()
    try:
        assert recorded.wait(30)
        assert first.count == 10  # not submitted yet: the GPU still holds 10
    finally:
        read_done.set()
        t.join()
    assert first.count == 60 and abi.read(first).size == 60


def test_a_live_or_overflowed_output_as_domain_count_hands_over_its_count_not_its_raw_counter():
    # Review helper 36: the counter word went over as it was: a live output's holds the count
    # before its run's clamp to n, an overflowed append's the attempted count.
    src = np.ones(100, np.float32)
    live = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    kept = make("t/filter", FILTER_YAML, FILTER_WGSL).run(n=100, inputs={"src": src}, params={"threshold": 0.5, "cap": 100}).outputs["hits"]
    first = live.run(n=10, inputs={"src": src}, domain_count=kept).outputs["dst"]  # 100 live upstream, 10 here
    second = live.run(n=30, inputs={"src": src}, domain_count=first).outputs["dst"]
    assert second.count == 10
    over = make("t/filter", FILTER_YAML, FILTER_WGSL).run(n=100, inputs={"src": src}, params={"threshold": 0.5, "cap": 2}).outputs["hits"]
    third = live.run(n=64, inputs={"src": src}, domain_count=over).outputs["dst"]
    assert third.count == 2 and abi.read(third).size == 2
    assert over.overflow == 100  # the count read after: the source is unchanged
    # Known on the host already: the same answer through the host path.
    assert live.run(n=30, inputs={"src": src}, domain_count=first).outputs["dst"].count == 10


def test_an_append_handed_back_reads_its_live_elements_through_its_buffer_and_takes_a_buffer_mapping():
    # Review helper 36: abi.read(kept2.buffer) answered the whole buffer once the first Output
    # was gone; {"buffer": Output} in outputs= raised a raw AttributeError.
    import gc

    variant = make("t/filter", FILTER_YAML, FILTER_WGSL)
    params = {"threshold": 0.5, "cap": 64}
    src = np.array([1, 2, 3, 0, 0, 0], np.float32)
    kept = variant.run(n=6, inputs={"src": src}, params=params).outputs["hits"]
    kept2 = variant.run(n=6, inputs={"src": src}, params=params, outputs={"hits": kept}).outputs["hits"]
    assert abi.read(kept2.buffer).size == 6
    del kept
    gc.collect()
    assert kept2.count == 6 and abi.read(kept2.buffer).size == 6
    kept3 = variant.run(n=6, inputs={"src": src}, params=params, outputs={"hits": {"buffer": kept2}}).outputs["hits"]
    assert kept3.count == 9
    np.testing.assert_array_equal(np.sort(abi.read(kept3)), np.sort(np.tile([1.0, 2.0, 3.0], 3)).astype(np.float32))


INOUT_YAML = "bindings:\n  - { name: z, kind: buffer, access: read_write, element: f32 }\n  - { name: x, kind: buffer, access: read, element: f32 }\n"
INOUT_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    z_set(i, z_get(i) * 2.0 + x_get(i));
}
"""


def test_host_data_for_a_read_write_input_is_uploaded_afresh_by_every_identical_call():
    # A list (or tuple, or array) for a read_write binding is uploaded into a buffer the run's
    # Output owns. An identical call took the repeat path and bound the first run's buffer again:
    # it doubled the first result in place, and once that Output was gone it wrote into a
    # buffer the pool had handed to an unrelated run (review helper 56).
    import gc

    variant = abi.program(key="t/inout_repeat", schema=abi.parse(INOUT_YAML, "t/inout_repeat/bindings.yaml"), wgsl=INOUT_WGSL).variant()
    other = make("t/index", INDEX_YAML, INDEX_WGSL)
    from engine_plugin.device.context import get_context
    from engine_plugin.runtime.buffers import STORAGE_USAGE

    x = get_context().device.create_buffer_with_data(data=np.zeros(4, np.float32), usage=STORAGE_USAGE)  # not host data
    for data in ([1.0, 2.0, 3.0, 4.0], (1.0, 2.0, 3.0, 4.0), np.array([1.0, 2.0, 3.0, 4.0], np.float32)):
        want = np.asarray(data, np.float32) * 2
        first = variant.run(4, inputs={"z": data, "x": x})
        second = variant.run(4, inputs={"z": data, "x": x})
        np.testing.assert_array_equal(abi.read(second.outputs["z"]), want)
        np.testing.assert_array_equal(abi.read(first.outputs["z"]), want)  # not changed under its holder
        del first, second
        gc.collect()
        unrelated = other.run(n=64)  # may get the buffer the first run's Output gave back
        np.testing.assert_array_equal(abi.read(variant.run(4, inputs={"z": data, "x": x}).outputs["z"]), want)
        np.testing.assert_array_equal(abi.read(unrelated.outputs["dst"]), np.arange(64, dtype=np.uint32))
    mutable = [1.0, 2.0, 3.0, 4.0]
    variant.run(4, inputs={"z": mutable, "x": x})
    mutable[0] = 10.0  # changed in place between identical calls: read again
    np.testing.assert_array_equal(abi.read(variant.run(4, inputs={"z": mutable, "x": x}).outputs["z"]), np.array([20, 4, 6, 8], np.float32))


GRID_YAML = """\
bindings:
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "n" }
workgroup: [8, 8]
"""
GRID_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, gid.x * 1000u + gid.y);
}
"""


def _grid_model(w: int, h: int) -> np.ndarray:
    ys, xs = np.mgrid[0:h, 0:w]
    return (xs * 1000 + ys).astype(np.uint32).reshape(-1)


def test_a_grid_of_0d_arrays_changed_in_place_is_read_again_by_an_identical_call():
    # The repeat path compared the grid tuple, whose elements compare by identity first: a
    # 0-d array changed in place looked unchanged, and the old grid's sizes were reused
    # (review helper 59). A grid of several-valued arrays raised numpy's ValueError there.
    from engine_plugin.errors import DispatchError

    variant = abi.program(key="t/grid_0d", schema=abi.parse(GRID_YAML, "t/grid_0d/bindings.yaml"), wgsl=GRID_WGSL).variant()
    w, h = np.array(3), np.array(2)
    grid = (w, h)
    first = variant.run(grid)
    np.testing.assert_array_equal(abi.read(first.outputs["dst"]), _grid_model(3, 2))
    assert first.n == (3, 2) and all(type(v) is int for v in first.n)
    w[...] = 5
    np.testing.assert_array_equal(abi.read(variant.run(grid).outputs["dst"]), _grid_model(5, 2))
    h[...] = 4
    np.testing.assert_array_equal(abi.read(variant.run((w, h)).outputs["dst"]), _grid_model(5, 4))
    variant.run((4, 2))
    with pytest.raises(DispatchError, match="n must be"):
        variant.run((np.array([4, 5]), 2))
    with abi.batch():
        c = np.array(2)
        a = variant.run((c,))
        c[...] = 6
        b = variant.run((c,))
    assert abi.read(a.outputs["dst"]).size == 2 and abi.read(b.outputs["dst"]).size == 6


def test_an_input_mapping_pointed_at_another_buffer_is_read_again_and_takes_only_buffer():
    from engine_plugin.device.context import get_context
    from engine_plugin.errors import DispatchError
    from engine_plugin.runtime.buffers import STORAGE_USAGE
    from runtime_kernels import AXPY_WGSL, AXPY_YAML

    variant = make("t/axpy_mapping", AXPY_YAML, AXPY_WGSL)
    dev = get_context().device
    a = dev.create_buffer_with_data(data=np.arange(8, dtype=np.float32), usage=STORAGE_USAGE)
    b = dev.create_buffer_with_data(data=np.arange(8, dtype=np.float32) * 10, usage=STORAGE_USAGE)
    given = {"buffer": a}
    inputs = {"x": given}
    np.testing.assert_array_equal(abi.read(variant.run(8, inputs=inputs, params={"a": 1.0}).outputs["y"]), np.arange(8) + 1.0)
    given["buffer"] = b  # the same mapping, another buffer
    np.testing.assert_array_equal(abi.read(variant.run(8, inputs=inputs, params={"a": 1.0}).outputs["y"]), np.arange(8) * 10 + 1.0)
    with pytest.raises(DispatchError, match="takes only 'buffer'"):
        variant.run(8, inputs={"x": {"buffer": a, "count": 3}}, params={"a": 1.0})  # a count an input would ignore


def test_a_bool_in_a_vector_param_is_refused_after_an_equal_list_of_ints_passed():
    from engine_plugin.errors import DispatchError

    yaml = 'bindings:\n  - { name: y, kind: buffer, access: read_write, element: u32, count: "n" }\nparams:\n  - { name: v, type: vec3<u32> }\n'
    body = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    y_set(i, params.v[i]);\n}\n"
    variant = abi.program(key="t/bool_vec", schema=abi.parse(yaml, "t/bool_vec/bindings.yaml"), wgsl=body).variant()
    variant.run(3, params={"v": [1, 2, 3]})
    with pytest.raises(DispatchError):
        variant.run(3, params={"v": [True, 2, 3]})


def test_a_nan_cast_by_value_on_the_gpu_is_zero_as_the_rule_says():
    # WGSL leaves NaN -> int undefined (-2**31 on lavapipe and the H200); the GPU casts (a
    # chained Output, a table accessor) now give 0, as BY_VALUE says (review helper 62).
    f32_yaml = 'bindings:\n  - { name: x, kind: buffer, access: read, element: f32 }\n  - { name: y, kind: buffer, access: read_write, element: f32, count: "n" }\n'
    copy_body = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    y_set(i, x_get(i));\n}\n"
    values = np.array([np.nan, 1.5, -2.5, -np.nan], np.float32)
    as_f32 = abi.program(key="t/nan_f32", schema=abi.parse(f32_yaml, "t/nan_f32/bindings.yaml"), wgsl=copy_body).variant()
    for t, want in (("i32", [0, 1, -2, 0]), ("u32", [0, 1, 0, 0])):
        yaml = f32_yaml.replace("element: f32", f"element: {t}")
        chained = abi.program(key=f"t/nan_{t}", schema=abi.parse(yaml, f"t/nan_{t}/bindings.yaml"), wgsl=copy_body).variant()
        got = abi.read(chained.run(n=4, inputs={"x": as_f32.run(n=4, inputs={"x": values}).outputs["y"]}).outputs["y"])
        dtype = np.int32 if t == "i32" else np.uint32
        np.testing.assert_array_equal(got, np.array(want, dtype=dtype))
        table_yaml = f'bindings:\n  - {{ name: cols, kind: columns, access: read }}\n  - {{ name: y, kind: buffer, access: read_write, element: {t}, count: "n" }}\n'
        table_body = copy_body.replace("x_get(i)", f"cols_{t}(0u, i, 0u)")
        via_table = abi.program(key=f"t/nan_table_{t}", schema=abi.parse(table_yaml, f"t/nan_table_{t}/bindings.yaml"), wgsl=table_body).variant()
        np.testing.assert_array_equal(abi.read(via_table.run(n=4, inputs={"cols": abi.table({"c": values})}).outputs["y"]), np.array(want, dtype=dtype))


STATS_YAML = """\
bindings:
  - { name: pts, kind: buffer, access: read, element: f32 }
  - { name: res, kind: buffer, access: read_write, element: f32, count: "2" }
  - { name: copy, kind: buffer, access: read_write, element: f32, count: "len(pts)" }
workgroup: 1
"""
STATS_WGSL = """\
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) != 0u) { return; }
    var m = 1e30;
    var s = 0.0;
    for (var i = 0u; i < pts_len(); i++) { m = min(m, pts_get(i)); s += pts_get(i); copy_set(i, pts_get(i)); }
    res_set(0u, m);
    res_set(1u, f32(arrayLength(&pts)));
}
"""


def test_an_append_output_chained_before_its_count_is_read_binds_its_live_elements_only():
    # SPEC: a binding covers exactly the live elements (arrayLength == NAME_len()). Chained
    # before anyone read its count, an append output was bound over its whole capacity: the
    # zeros past the count entered the next kernel, and len() in count expressions was the
    # capacity; reading .count first gave the right answer (helper 72).
    filt = make("t/filter", FILTER_YAML, FILTER_WGSL)
    stats = make("t/stats_of_hits", STATS_YAML, STATS_WGSL)
    src = np.arange(1, 101, dtype=np.float32)
    for peek in (False, True):
        hits = filt.run(n=100, inputs={"src": src}, params={"threshold": 90.0, "cap": 256}).outputs["hits"]
        if peek:
            assert hits.count == 10
        run = stats.run(n=1, inputs={"pts": hits})
        assert abi.read(run.outputs["res"]).tolist() == [91.0, 10.0], f"peek={peek}"
        np.testing.assert_array_equal(np.sort(abi.read(run.outputs["copy"])), src[src > 90.0])
        # the same call again (the repeat path) after the count is known, in a batch too
        with abi.batch():
            again = stats.run(n=1, inputs={"pts": hits})
        assert abi.read(again.outputs["res"]).tolist() == [91.0, 10.0]


def test_the_seeds_read_of_an_outputs_buffer_in_one_expression_answers_its_live_typed_elements():
    # The seed reads abi.read(run.outputs.dst.buffer). Written as one expression, the Run and
    # its Output were garbage before the read: it answered the whole pooled buffer as f32
    # words, an earlier run's data past the count included (helper 72).
    variant = make("t/index", INDEX_YAML, INDEX_WGSL)
    big = variant.run(n=60).outputs["dst"]  # the pool's buffer of this size class holds 0..59
    del big
    got = abi.read(variant.run(n=5).outputs["dst"].buffer)
    assert got.dtype == np.uint32 and got.tolist() == [0, 1, 2, 3, 4]
    kept = variant.run(n=7).outputs["dst"]
    buffer = kept.buffer
    del kept  # the buffer outlives its Output: still its live elements
    assert abi.read(buffer).tolist() == list(range(7))
    assert abi.read(buffer, as_u32=True).tolist() == list(range(7))


COPY_WHERE_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "n" }
"""
COPY_WHERE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    if (i < x_len()) { y_set(i, x_get(i)); }
}
"""
FIRST_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: vec4<f32> }
  - { name: y, kind: buffer, access: read_write, element: vec4<f32>, count: "len(x)" }
  - { name: probe, kind: buffer, access: read_write, element: vec4<f32>, count: "2" }
"""
FIRST_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    if (i == 0u) { probe_set(0u, y_get(0u)); probe_set(1u, x_get(0u)); }
    if (i < x_len()) { y_set(i, x_get(i) * 2.0); }
}
"""


def test_an_outputs_handed_out_buffer_given_to_outputs_is_that_output_and_holds_no_more():
    # Given as outputs= for a larger run, the handed-out buffer's pool slack (an earlier run's
    # data) came back as the elements the kernel did not write (helper 74).
    import gc

    from engine_plugin.errors import DispatchError

    v = make("t/copy_where", COPY_WHERE_YAML, COPY_WHERE_WGSL)
    other = v.run(64, inputs={"x": np.full(64, 7.0, np.float32)}).outputs["y"]
    abi.read(other)
    del other
    gc.collect()
    y1 = v.run(5, inputs={"x": np.arange(5, dtype=np.float32)}).outputs["y"]
    buf = y1.buffer
    with pytest.raises(DispatchError, match="holds 5 elements"):
        v.run(8, inputs={"x": np.arange(5, dtype=np.float32)}, outputs={"y": buf})
    with pytest.raises(DispatchError, match="holds 5 elements"):
        v.run(8, inputs={"x": np.arange(5, dtype=np.float32)}, outputs={"y": {"buffer": buf}})
    same = v.run(5, inputs={"x": np.arange(5, dtype=np.float32) + 1}, outputs={"y": buf}).outputs["y"]
    assert abi.read(same).tolist() == [1, 2, 3, 4, 5]


def test_empty_bindings_bind_zeros_not_an_earlier_runs_data():
    # WebGPU binds no empty range: an empty input bound one word of a pooled buffer nothing
    # wrote, and an empty vec4 output 16 bytes of which 4 were cleared (helper 74).
    import gc

    k = make("t/empty_vec4", FIRST_YAML, FIRST_WGSL)
    r = k.run(16, inputs={"x": np.full((16, 4), 21.0, np.float32)})
    abi.read(r.outputs["y"])
    del r
    gc.collect()
    for _ in range(2):  # the second takes the repeat path
        r = k.run(1, inputs={"x": np.zeros((0, 4), np.float32)})
        assert abi.read(r.outputs["y"]).shape == (0, 4)
        assert abi.read(r.outputs["probe"]).tolist() == [[0.0] * 4, [0.0] * 4]


def test_an_output_recorded_in_another_threads_open_batch_is_not_read_before_it_ends():
    # The read submitted only the reading thread's batches: it answered the pooled buffers'
    # earlier data and count, and the append's count stayed cached wrong (helper 74).
    import gc
    import threading

    from engine_plugin.errors import DispatchError

    filt = make("t/filter", FILTER_YAML, FILTER_WGSL)
    old = filt.run(n=8, inputs={"src": np.full(8, 5.0, np.float32)}, params={"threshold": 0.5, "cap": 8}).outputs["hits"]
    assert old.count == 8
    del old
    gc.collect()
    recorded, done, box = threading.Event(), threading.Event(), {}

    def producer():
        with abi.batch():
            box["hits"] = filt.run(n=8, inputs={"src": np.array([1, -1, 2, -1, -1, -1, -1, -1], np.float32)}, params={"threshold": 0.5, "cap": 8}).outputs["hits"]
            recorded.set()
            done.wait(30)

    t = threading.Thread(target=producer)
    t.start()
    try:
        assert recorded.wait(30)
        hits = box["hits"]
        with pytest.raises(DispatchError, match="another thread"):
            hits.count
        with pytest.raises(DispatchError, match="another thread"):
            abi.read(hits)
    finally:
        done.set()
        t.join()
    assert hits.count == 2 and sorted(abi.read(hits).tolist()) == [1.0, 2.0]


def test_batches_of_interleaved_asyncio_tasks_stay_each_tasks_own():
    # Two tasks' batches on one thread: the first to end popped the other's (the top of a
    # per-thread stack), whose later runs went into an ended batch with nothing held: a buffer
    # a recorded run still read was handed to another run's upload (helper 74).
    import asyncio
    import gc

    v = make("t/axpy_tasks", AXPY_YAML, AXPY_WGSL)
    x = np.arange(4, dtype=np.float32)

    async def short():
        with abi.batch():
            await asyncio.sleep(0.01)

    async def long(out):
        with abi.batch():
            await asyncio.sleep(0.03)
            y1 = v.run(4, inputs={"x": x}, params={"a": 2.0}).outputs["y"]
            out["y2"] = v.run(4, inputs={"x": {"buffer": y1}}, params={"a": 10.0}).outputs["y"]
            del y1
            gc.collect()
            out["y3"] = v.run(4, inputs={"x": x}, params={"a": 1.0}).outputs["y"]

    async def main():
        out = {}
        await asyncio.gather(short(), long(out))
        return out

    out = asyncio.run(main())
    np.testing.assert_array_equal(abi.read(out["y2"]), 10 * (2 * x + 1) + 1)
    np.testing.assert_array_equal(abi.read(out["y3"]), x + 1)


def test_the_seeds_read_of_a_handed_out_buffer_every_run_frees_each_buffer_without_the_collector():
    # The Output riding on its handed-out buffer was a reference cycle (freed only by a full
    # collection; never with gc disabled, as frame loops do), and the variant's bind-group
    # caches kept up to 256 handed-out buffers alive (helper 76).
    import gc

    import wgpu

    variant = make("t/index_big", INDEX_YAML, INDEX_WGSL)
    n = 1 << 14

    def live_buffers() -> int:
        return wgpu.diagnostics.object_counts.get_dict()["Buffer"]["count"]

    abi.read(variant.run(n=n).outputs["dst"].buffer)
    gc.collect()
    before = live_buffers()
    gc.disable()
    try:
        for _ in range(100):
            got = abi.read(variant.run(n=n).outputs["dst"].buffer)
        after = live_buffers()
    finally:
        gc.enable()
    assert got[-1] == n - 1
    assert after - before <= 4, (before, after)


def test_a_handed_out_buffer_binds_its_current_owners_live_words_raw_on_every_call():
    # It covered the whole pooled buffer: len() was the pool's size class and the padding's
    # zeros (or an earlier run's data) entered the kernel (helper 75). Now bound raw like any
    # buffer (it was cast by value, helper 76), over the live bytes of the
    # Output that owns it now: the repeat path kept the first owner's count after the buffer
    # was handed back through outputs= (helper 76).
    filt = make("t/filter", FILTER_YAML, FILTER_WGSL)
    stats = make("t/stats_of_hits", STATS_YAML, STATS_WGSL)
    src = np.arange(1, 101, dtype=np.float32)
    hits = filt.run(n=100, inputs={"src": src}, params={"threshold": 90.0, "cap": 256}).outputs["hits"]
    buf = hits.buffer
    for _ in range(2):  # the second takes the full path again: the owner may change (below)
        run = stats.run(n=1, inputs={"pts": buf})
        assert abi.read(run.outputs["res"]).tolist() == [91.0, 10.0] and run.outputs["copy"].count == 10
    more = filt.run(n=100, inputs={"src": src}, params={"threshold": 50.0, "cap": 256}, outputs={"hits": buf}).outputs["hits"]
    assert more.count == 50
    assert abi.read(stats.run(n=1, inputs={"pts": buf}).outputs["res"]).tolist()[1] == 50.0  # the same call again
    words = make("t/index_copy_u32", COPY_WHERE_YAML.replace("element: f32", "element: u32"), COPY_WHERE_WGSL)
    got = abi.read(words.run(n=4, inputs={"x": make("t/axpy_tasks", AXPY_YAML, AXPY_WGSL).run(4, inputs={"x": np.ones(4, np.float32)}, params={"a": 0.5}).outputs["y"].buffer}).outputs["y"])
    assert got.tolist() == [int(np.float32(1.5).view(np.uint32))] * 4


def test_an_unbound_read_write_table_is_empty_in_every_run_whatever_another_kernel_wrote():
    # Every unbound read_write table bound one shared constant: one kernel's setters wrote into
    # every later kernel's "empty" table (helper 74).
    writer = make("t/empty_table_writer", "bindings:\n  - { name: cols, kind: columns, access: read_write }\n  - { name: y, kind: buffer, access: read_write, element: f32, count: \"n\" }\n",
                  "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
                  "    cols_set_vec4(0u, 0u, vec4<f32>(42.0, 2.5, 0.0, 7.0));\n    y_set(i, 1.0);\n}\n")
    reader = make("t/empty_table_reader", "bindings:\n  - { name: t, kind: columns, access: read_write }\n  - { name: y, kind: buffer, access: read_write, element: f32, count: \"n\" }\n",
                  "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
                  "    if (i == 0u) { y_set(i, f32(t_count(0u))); } else { y_set(i, t_f32(0u, i - 1u, 0u)); }\n}\n")
    assert abi.read(reader.run(4).outputs["y"]).tolist() == [0.0] * 4
    for _ in range(2):
        abi.read(writer.run(1).outputs["y"])
        assert abi.read(reader.run(4).outputs["y"]).tolist() == [0.0] * 4


def test_a_task_created_inside_a_batch_that_runs_after_it_ended_submits_its_own_runs():
    # asyncio.create_task copies the context: the child saw the ended batch as current, and its
    # run stayed recorded there, never submitted (its output read zeros) (helper 78).
    import asyncio

    v = make("t/axpy_tasks", AXPY_YAML, AXPY_WGSL)
    x = np.arange(4, dtype=np.float32)

    async def child(out):
        await asyncio.sleep(0.02)
        out["y"] = v.run(4, inputs={"x": x}, params={"a": 2.0}).outputs["y"]

    async def main():
        out = {}
        with abi.batch():
            task = asyncio.create_task(child(out))
        await task
        return out

    np.testing.assert_array_equal(abi.read(asyncio.run(main())["y"]), 2 * x + 1)


def test_a_live_count_on_a_gpu_counter_is_not_read_from_another_thread_while_its_batch_is_open():
    # Its snapshot counter was not among the batch's fresh buffers: another thread read an
    # earlier user's count, and kept it (helper 78).
    import gc
    import threading

    import wgpu

    from engine_plugin.errors import DispatchError

    second = make("t/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    src = np.arange(10, dtype=np.float32)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
    old = second.run(n=10, inputs={"src": src}, domain_count=abi.device().create_buffer_with_data(data=np.array([9], np.uint32), usage=usage)).outputs["dst"]
    assert old.count == 9
    del old
    gc.collect()
    count = abi.device().create_buffer_with_data(data=np.array([3], np.uint32), usage=usage)
    recorded, done, box = threading.Event(), threading.Event(), {}

    def producer():
        with abi.batch():
            box["dst"] = second.run(n=10, inputs={"src": src}, domain_count=count).outputs["dst"]
            recorded.set()
            done.wait(30)

    t = threading.Thread(target=producer)
    t.start()
    try:
        assert recorded.wait(30)
        with pytest.raises(DispatchError, match="another thread"):
            box["dst"].count
    finally:
        done.set()
        t.join()
    assert box["dst"].count == 3 and abi.read(box["dst"]).tolist() == [0.0, 2.0, 4.0]


def test_an_empty_output_chained_through_a_conversion_binds_zeros():
    # Nothing to convert, and nothing cleared the element WebGPU still binds (helper 78).
    import gc

    k = make("t/empty_f32", FIRST_YAML.replace("vec4<f32>", "f32"), FIRST_WGSL)
    index = make("t/index", INDEX_YAML, INDEX_WGSL)
    probe = index.run(n=64).outputs["dst"]  # u32 0..63 in a pooled buffer
    abi.read(probe)
    del probe
    gc.collect()
    empty = index.run(n=0).outputs["dst"]  # a u32 output with no elements: cast to f32 on the way in
    got = abi.read(k.run(1, inputs={"x": empty}).outputs["probe"])
    assert got.tolist() == [0.0, 0.0]


def test_bind_group_caches_keep_no_handed_out_buffer_of_several_runs_a_frame():
    # Only the group cached last was dropped: two runs a frame, both handed out, kept one
    # buffer a frame alive up to the cache's 256 entries (helper 78).
    import gc

    import wgpu

    variant = make("t/index_big2", INDEX_YAML, INDEX_WGSL)

    def live_buffers() -> int:
        return wgpu.diagnostics.object_counts.get_dict()["Buffer"]["count"]

    gc.collect()
    gc.disable()
    try:
        for frame in range(60):
            a, b = variant.run(n=1 << 12).outputs["dst"], variant.run(n=1 << 12).outputs["dst"]
            a.buffer, b.buffer
            del a, b
            if frame == 9:
                before = live_buffers()
        after = live_buffers()
    finally:
        gc.enable()
    assert after - before <= 4, (before, after)


def test_one_buffer_given_to_two_written_bindings_is_refused_naming_both():
    # An Output handed as a read_write input and as outputs= of another binding: both wrote the
    # same words, a race (helper 77). Placed outputs sharing one buffer at separate ranges stay allowed.
    from engine_plugin.errors import DispatchError

    v = make("t/alias_rw", "bindings:\n  - { name: io, kind: buffer, access: read_write, element: u32 }\n  - { name: o, kind: buffer, access: read_write, element: u32, count: \"n\" }\n",
             "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
             "    let old = io_get(i);\n    o_set(i, 1000u + i);\n    io_set(i, old + 1u);\n}\n")
    shared = v.run(n=4, inputs={"io": np.zeros(4, np.uint32)}).outputs["o"]
    with pytest.raises(DispatchError, match="'io' and 'o' are the same buffer or texture, both written"):
        v.run(n=4, inputs={"io": shared}, outputs={"o": shared})
    assert abi.read(shared).tolist() == [1000, 1001, 1002, 1003]


def test_empty_struct_bindings_bind_one_zeroed_element_not_a_raw_wgpu_error():
    # A struct binding with no elements was bound over 4 bytes where the shader's element is
    # its stride: a raw GPUValidationError (helper 77).
    body = ("@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
            "    out_set(i, src_len() * 100u + u32(src_get(0u).m0.y));\n}\n")
    yaml = ("structs:\n  S1: { m0: vec4<i32> }\nbindings:\n  - { name: src, kind: buffer, access: read, element: S1 }\n"
            "  - { name: out, kind: buffer, access: read_write, element: u32, count: \"n\" }\n")
    v = make("t/empty_struct_in", yaml, body)
    stale = np.zeros(4, np.dtype([("m0", "<i4", 4)]))
    stale["m0"] = 7
    v.run(n=1, inputs={"src": stale})
    got = abi.read(v.run(n=2, inputs={"src": np.zeros(0, np.dtype([("m0", "<i4", 4)]))}).outputs["out"])
    assert got.tolist() == [0, 0]
    app = make("t/empty_struct_append", "structs:\n  S0: { m0: vec4<u32>, m1: f32 }\nbindings:\n  - { name: ap, kind: buffer, access: read_write, element: S0, capacity: \"0\", append: true }\n",
               "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    ap_store(i, S0(vec4<u32>(i), 1.0));\n}\n")
    out = app.run(n=4).outputs["ap"]
    assert out.count == 0 and abi.read(out).shape == (0,)
