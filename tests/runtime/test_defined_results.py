"""Results you can trust: what a kernel and its caller observe is defined.

Each test reproduces a defect found by porting public kernels: pooled outputs holding another
run's data, arrayLength answering pooled capacity, live counts aliasing recycled counters,
abi.batch() answering stale data, abi.read(output.buffer) returning slack.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import wgpu
from runtime_kernels import AXPY_WGSL, AXPY_YAML

from engine_plugin import abi
from engine_plugin.device.context import get_context
from engine_plugin.errors import LoweringError

pytestmark = pytest.mark.gpu


def make(key: str, yaml: str, wgsl: str, **spec):
    schema = abi.parse(yaml, f"{key}/bindings.yaml")
    return abi.program(key=key, schema=schema, wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl").variant(specialize=spec or None)


# A histogram with global atomics, as webgpufundamentals writes it: every invocation adds one.
HIST_YAML = """\
bindings:
  - { name: px,   kind: buffer, access: read, element: u32 }
  - { name: bins, kind: buffer, access: read_write, element: u32, count: "nbins", atomic: true }
params:
  - { name: nbins, type: u32 }
"""
HIST_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let numBins = arrayLength(&bins);
    let b = min(px_get(i), numBins - 1u);
    bins_atomic_add(b, 1u);
}
"""

# Writes only where src > 5: every other element must read as zero.
WHERE_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
"""
WHERE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    if (src_get(i) > 5.0) { dst_set(i, src_get(i)); }
}
"""

FILL_YAML = """\
bindings:
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: value, type: f32 }
"""
FILL_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, params.value);
}
"""


def test_a_histogram_run_five_times_counts_each_image_once():
    hist = make("t13/hist", HIST_YAML, HIST_WGSL)
    px = np.random.default_rng(1).integers(0, 100, 12_000).astype(np.uint32)
    want = np.bincount(px, minlength=100).astype(np.uint32)
    for _ in range(5):
        run = hist.run(n=px.size, inputs={"px": px}, params={"nbins": 100})
        np.testing.assert_array_equal(abi.read(run.outputs["bins"]), want)
        del run
        gc.collect()


def test_an_output_never_shows_what_another_kernel_left_in_its_pooled_buffer():
    fill = make("t13/fill", FILL_YAML, FILL_WGSL)
    where = make("t13/where", WHERE_YAML, WHERE_WGSL)
    for _ in range(3):
        junk = fill.run(n=64, params={"value": 777.0})
        abi.read(junk.outputs["dst"])
        del junk
        gc.collect()
        src = np.arange(64, dtype=np.float32)
        got = abi.read(where.run(n=64, inputs={"src": src}).outputs["dst"])
        np.testing.assert_array_equal(got, np.where(src > 5, src, 0))


def test_clear_false_opts_out_and_keeps_what_the_pool_held():
    fill = make("t13/fill", FILL_YAML, FILL_WGSL)
    keep = make("t13/keep", WHERE_YAML.replace('count: "len(src)"', 'count: "len(src)", clear: false'), WHERE_WGSL)
    junk = fill.run(n=64, params={"value": 777.0})
    abi.read(junk.outputs["dst"])  # read as an Output: its buffer stays pooled
    del junk
    gc.collect()
    zeros = get_context().device.create_buffer_with_data(data=np.zeros(64, np.float32), usage=wgpu.BufferUsage.STORAGE)
    run = keep.run(n=64, inputs={"src": zeros})
    # The pool handed the junk's buffer back, as it was (where writes nothing).
    np.testing.assert_array_equal(abi.read(run.outputs["dst"]), np.full(64, 777.0, np.float32))


def test_clear_is_refused_on_a_binding_the_host_does_not_allocate():
    from engine_plugin.errors import SchemaError

    with pytest.raises(SchemaError, match="clear applies to outputs") as info:
        abi.parse("bindings:\n  - { name: src, kind: buffer, access: read, element: f32, clear: false }\n", "x/bindings.yaml")
    assert info.value.span.line == 2


# arrayLength on every binding kind, against the live lengths the host passed.
LENGTHS_YAML = """\
bindings:
  - { name: src,  kind: buffer, access: read, element: f32 }
  - { name: v3,   kind: buffer, access: read, element: vec3<f32> }
  - { name: cols, kind: columns, access: read }
  - { name: hits, kind: buffer, access: read_write, element: u32, capacity: "7", append: true }
  - { name: dst,  kind: buffer, access: read_write, element: u32, count: "8" }
workgroup: 1
"""
LENGTHS_WGSL = """\
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) != 0u) { return; }
    dst_set(0u, arrayLength(&src));
    dst_set(1u, src_len());
    dst_set(2u, 0u);  // arrayLength(&v3) is refused: it would count words (see below)
    dst_set(3u, v3_len());
    dst_set(4u, arrayLength(&cols));
    dst_set(5u, arrayLength(&hits));
    dst_set(6u, arrayLength(&dst));
    dst_set(7u, arrayLength(&hits_count));
}
"""


def test_array_length_of_every_binding_kind_is_its_live_length():
    v = make("t13/lengths", LENGTHS_YAML, LENGTHS_WGSL)
    # NB: a 5-element input sits in a pooled buffer of 64 elements; the binding covers 5.
    table = abi.table({"w": np.ones(3, np.float32)})
    run = v.run(n=1, inputs={"src": np.ones(5, np.float32), "v3": np.ones((2, 3), np.float32), "cols": table})
    got = abi.read(run.outputs["dst"])
    np.testing.assert_array_equal(got, [5, 5, 0, 2, table.words.size, 7, 8, 1])
    # chained: an earlier output as an input binds exactly that output's elements
    chained = v.run(n=1, inputs={"src": make("t13/fill", FILL_YAML, FILL_WGSL).run(n=3, params={"value": 1.0}).outputs["dst"],
                                "v3": np.ones((1, 3), np.float32)})
    np.testing.assert_array_equal(abi.read(chained.outputs["dst"])[:4], [3, 3, 0, 1])


@pytest.mark.parametrize(
    "element,extra,lanes",
    [("vec3<f32>", "", 3), ("vec2<f32>", ", bits: true", 2), ("vec4<u32>", ", bits: true", 4)],
)
def test_array_length_of_a_binding_stored_as_several_words_an_element_is_refused_at_its_call(element, extra, lanes):
    # vec3 (and bits vectors) are stored as flat words (the seed's layout): arrayLength counts
    # words, so a loop ported from array<vec3<f32>> ran three times past the data (review
    # helper 106). Refused at the user's line and column, naming NAME_len().
    yaml = f"bindings:\n  - {{ name: pts, kind: buffer, access: read, element: {element}{extra} }}\n  - {{ name: dst, kind: buffer, access: read_write, element: u32, count: \"1\" }}\n"
    body = (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    if (zero_index(gid) != 0u) { return; }\n"
        "    var total = 0u;\n"
        "    for (var i = 0u; i < arrayLength( &pts ); i++) { total += 1u; }\n"
        "    dst_set(0u, total);\n}\n"
    )
    with pytest.raises(LoweringError) as info:
        make(f"t13/words_{lanes}{bool(extra)}", yaml, body)
    err = info.value
    assert err.span.path.endswith("kernel.wgsl") and (err.span.line, err.span.col) == (5, 26)
    assert f"{lanes} per element" in err.message and "pts_len()" in err.message
    # Any pointer to the whole buffer reaches the same count (review helper 110: these lowered
    # and answered 15 words for 5 elements), in the body or in a module it imports.
    for form in ("arrayLength(&(pts))", "arrayLength(&*&pts)", "n_of(&pts)"):
        bypass = body.replace("arrayLength( &pts )", form).replace("@compute", "fn n_of(p: ptr<storage, array<u32>, read>) -> u32 { return arrayLength(p); }\n@compute")
        with pytest.raises(LoweringError, match=f"{lanes} per element") as info:
            make(f"t13/words_bypass_{lanes}{bool(extra)}_{len(form)}", yaml, bypass)
        assert info.value.span.path.endswith("kernel.wgsl") and info.value.span.line >= 5
    kept = body.replace("arrayLength( &pts )", "arrayLength(p)").replace("var total = 0u;", "var total = 0u;\n    let p = &pts;")
    with pytest.raises(LoweringError, match="a pointer to 'pts'") as info:
        make(f"t13/words_let_{lanes}{bool(extra)}", yaml, kept)
    assert (info.value.span.line, info.value.span.col) == (5, 13)
    schema = abi.parse(yaml, "t13/words_mod/bindings.yaml")
    with pytest.raises(LoweringError, match=f"{lanes} per element") as info:
        abi.lower(schema, "#import count\n" + body.replace("arrayLength( &pts )", "count_pts()"), {}, wgsl_path="t13/words_mod/kernel.wgsl",
                  modules={"count": ("m/count.wgsl", "fn count_pts() -> u32 {\n    return arrayLength(&pts);\n}\n")})
    assert (info.value.span.path, info.value.span.line, info.value.span.col) == ("m/count.wgsl", 2, 12)
    # Review helper 112: a left-to-right mark (WGSL blankspace) between '&' and the name got
    # past the token check; a local spelled like the binding, a binary '&' or '&&', and
    # '&(pts)[0]' were refused. A local shadows only from its declaration to its block's end.
    lrm = body.replace("arrayLength( &pts )", "arrayLength(&\u200epts)")
    with pytest.raises(LoweringError, match=f"{lanes} per element"):
        make(f"t13/words_lrm_{lanes}{bool(extra)}", yaml, lrm)
    helpers = "fn mask(m: u32, pts: u32) -> u32 { return m & pts; }\nfn both(a: bool, pts: bool) -> bool { return a && pts; }\n"
    # Word indexing stays for bits vectors (words by the schema's choice); a plain vec3's is
    # refused (test_indexing_a_plain_vec3_buffer_is_refused_at_its_line).
    words = "\n    let w = &(pts)[0];\n    let x = (&pts)[1];\n    let y = (*&pts)[1];" if extra else ""
    fine = body.replace("@compute", helpers + "@compute").replace(
        "var total = 0u;", "var total = mask(0u, 1u);\n    { var pts = 3u; let q = &pts; total += *q - 3u; }" + words
    )
    make(f"t13/words_locals_{lanes}{bool(extra)}", yaml, fine.replace("arrayLength( &pts )", "pts_len()"))
    for late in (
        "arrayLength( &pts ); let pts = 1u; total += pts",
        "arrayLength( &pts ); { let pts = 1u; total += pts; }",
        # helper 113: an initializer still sees the binding; a for header's local ends with the
        # for; only parentheses opened after the '&' are skipped before an index
        "0u; let pts = arrayLength(&pts); total += pts",
        "0u; for (var pts = 0u; pts < 1u; pts++) { total += pts; } total += arrayLength(&pts)",
        "0u; for (var pts = arrayLength(&pts); pts < 1u; pts++) { }",
        "vec2<u32>(arrayLength(&pts))[0]",
        "vec2<u32>(arrayLength(&pts)).x",
    ):
        scoped = fine.replace("arrayLength( &pts )", "pts_len()").replace("dst_set(0u, total);", f"total += {late};\n    dst_set(0u, total);")
        with pytest.raises(LoweringError, match=f"{lanes} per element"):
            make(f"t13/words_late_{lanes}{bool(extra)}_{len(late)}", yaml, scoped)
    # NAME_len() and arrayLength of a binding stored one element a slot are what they were
    fine = body.replace("arrayLength( &pts )", "pts_len()")
    run = make(f"t13/words_ok_{lanes}{bool(extra)}", yaml, fine).run(n=1, inputs={"pts": np.ones((5, lanes), np.float32 if "f32" in element else np.uint32)})
    assert abi.read(run.outputs["dst"])[0] == 5


V3_YAML = """\
bindings:
  - { name: pos, kind: buffer, access: read, element: vec3<f32> }
  - { name: out, kind: buffer, access: read_write, element: vec3<f32>, count: "len(pos)" }
"""
V3_BODY = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    STMT
}
"""


@pytest.mark.parametrize(
    "stmt,col",
    [
        ("out[i] = pos[i] * 2.0;", 5),  # public code over array<vec3<f32>>: word i, not element i
        ("out_set(i, pos[i] * 2.0);", 16),
        ("let q = &pos[i]; out_set(i, vec3<f32>(*q));", 14),
        ("out_set(i, vec3<f32>((pos)[i]));", 27),
        ("out_set(i, vec3<f32>((&pos)[i]));", 28),
        ("out_set(i, vec3<f32>((*&pos)[i]));", 29),
    ],
)
def test_indexing_a_plain_vec3_buffer_is_refused_at_its_line(stmt, col):
    # Review helper 145: a vec3 buffer is stored as flat words (its WGSL array would take a
    # 16-byte stride), so pos[i] was word i: `out[i] = pos[i] * 2.0` compiled and answered
    # rows 0-2 right, row 3 [18, 0, 0] and zeros after. Refused, naming the accessors.
    with pytest.raises(LoweringError) as info:
        make(f"t13/v3_index_{col}_{len(stmt)}", V3_YAML, V3_BODY.replace("STMT", stmt))
    err = info.value
    assert err.span.path.endswith("kernel.wgsl") and (err.span.line, err.span.col) == (5, col), err
    assert "word i, not element i" in err.message and "_get(i)" in err.message
    # The accessors compute on elements; a local or parameter of the same name is its own.
    fine = make("t13/v3_ok", V3_YAML, V3_BODY.replace("STMT", "var out = array<f32, 2>(1.0, 2.0); out[1] = 0.0; pos_set_unused(i);").replace(
        "pos_set_unused(i);", "out_set(i, pos_get(i) * 2.0 + out[1]);"
    ))
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    np.testing.assert_array_equal(abi.read(fine.run(n=10, inputs={"pos": x}).outputs["out"]), x * 2)


ATOMIC_YAML = """\
bindings:
  - { name: acc, kind: buffer, access: read_write, element: T, atomic: true, count: "n" }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
specialize:
  - { name: T, options: [i32, f32, u32] }
determinism: float_order
"""


@pytest.mark.parametrize(
    "stmt,col",
    [
        ("let v = atomicLoad(&acc[i]); out_set(i, f32(v));", 25),  # the k-means divide kernel's read
        ("atomicAdd(&acc[i], 1);", 16),  # naga named an unrelated line for an i32 operand
        ("atomicStore(&(acc)[i], 0u);", 19),
        ("out_set(i, f32(acc[i]));", 20),
        ("let p = &acc; out_set(i, f32(atomicLoad(&(*p)[i])));", 13),  # review helper 156: a whole-buffer pointer
        ("out_set(i, f32(atomicLoad(&(*(&acc))[i])));", 35),
    ],
)
@pytest.mark.parametrize("scalar", ["i32", "f32"])
def test_indexing_an_i32_or_f32_atomic_buffer_is_refused_at_its_line(stmt, col, scalar):
    # Review helper 153: a one-lane atomic i32/f32 buffer is declared array<atomic<u32>>, so
    # the body's own atomicLoad(&acc[i]) answered the value's bits as a u32: a ported k-means
    # divide step computed centroids of 87,380 where numpy says -1. Refused at the user's
    # line, naming the accessors that convert.
    with pytest.raises(LoweringError) as info:
        make(f"t13/atomic_index_{col}_{len(stmt)}", ATOMIC_YAML, V3_BODY.replace("STMT", stmt), T=scalar)
    err = info.value
    assert err.span.path.endswith("kernel.wgsl") and (err.span.line, err.span.col) == (5, col), err
    assert f"atomic {scalar}" in err.message and "acc_get(i)" in err.message and "acc_atomic_" in err.message


def test_the_atomic_accessors_and_u32_words_still_compute_on_values():
    # What the refusal above points to: acc_get / acc_atomic_add convert; u32 words index as before.
    # arrayLength of the whole buffer is its element count (one word an element): allowed.
    body = V3_BODY.replace("STMT", "acc_atomic_add(i, T(2)); out_set(i, f32(acc_get(i)) + f32(arrayLength(&acc)) - 5.0);")
    for scalar, dtype in (("i32", np.int32), ("f32", np.float32)):
        v = make("t13/atomic_accessors", ATOMIC_YAML, body, T=scalar)
        got = abi.read(v.run(n=5).outputs["out"])
        np.testing.assert_array_equal(got, np.full(5, 2, np.float32), err_msg=scalar)
    words = make("t13/atomic_u32_words", ATOMIC_YAML, V3_BODY.replace("STMT", "atomicAdd(&acc[i], 3u); out_set(i, f32(atomicLoad(&acc[i])));"), T="u32")
    got = abi.read(words.run(n=4).outputs["out"])
    np.testing.assert_array_equal(got, np.full(4, 3, np.float32))


def test_an_unbound_columns_binding_is_an_empty_table():
    v = make("t13/lengths", LENGTHS_YAML, LENGTHS_WGSL)
    run = v.run(n=1, inputs={"src": np.ones(2, np.float32), "v3": np.ones((1, 3), np.float32)})
    assert abi.read(run.outputs["dst"])[4] == 1  # one word: the column count, 0


# Stream compaction: an append producer, then a live consumer over its count.
COMPACT_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: kept, kind: buffer, access: read_write, element: f32, capacity: "len(src)", append: true }
determinism: float_order
"""
COMPACT_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    if (src_get(i) > 0.0) { kept_append(src_get(i)); }
}
"""
LIVE_YAML = """\
bindings:
  - { name: live, kind: domain_count }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n", live: true }
"""
LIVE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, 1.0);
}
"""


def test_a_live_count_survives_its_producer_being_dropped_and_its_counter_reused():
    compact = make("t13/compact", COMPACT_YAML, COMPACT_WGSL)
    live = make("t13/live", LIVE_YAML, LIVE_WGSL)
    src = np.where(np.arange(40) % 4 == 0, 1.0, -1.0).astype(np.float32)  # 10 kept
    produced = compact.run(n=40, inputs={"src": src})
    consumer = live.run(domain_count=produced.outputs["kept"])
    del produced
    gc.collect()
    for _ in range(3):  # recycled counters get overwritten by other runs
        compact.run(n=40, inputs={"src": np.ones(40, np.float32)}).outputs["kept"].count
    assert consumer.outputs["dst"].count == 10
    np.testing.assert_array_equal(abi.read(consumer.outputs["dst"]), np.ones(10, np.float32))


def test_live_takes_its_count_from_an_int_or_a_gpu_buffer():
    live = make("t13/live", LIVE_YAML, LIVE_WGSL)
    run = live.run(n=20, domain_count=7)
    assert run.outputs["dst"].count == 7
    np.testing.assert_array_equal(abi.read(run.outputs["dst"]), np.ones(7, np.float32))
    dev = get_context().device
    counter = dev.create_buffer_with_data(data=np.array([5, 0, 0, 0], np.uint32), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    run = live.run(n=20, domain_count=counter)
    dev.queue.write_buffer(counter, 0, np.array([9], np.uint32))  # later changes do not move it
    assert run.outputs["dst"].count == 5
    np.testing.assert_array_equal(abi.read(run.outputs["dst"]), np.ones(5, np.float32))
    assert live.run(n=3, domain_count=counter).outputs["dst"].count == 3  # clamped to n


ADD_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
params:
  - { name: k, type: f32 }
"""
ADD_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) + params.k);
}
"""


@pytest.mark.usefixtures("young_gc")
def test_a_batch_chain_with_dropped_intermediates_is_not_overwritten_by_later_uploads():
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    with abi.batch():
        x = add.run(n=8, inputs={"src": np.zeros(8, np.float32)}, params={"k": 1.0}).outputs["dst"]
        for _ in range(100):
            x = add.run(n=8, inputs={"src": x}, params={"k": 1.0}).outputs["dst"]  # the previous x is dropped
            gc.collect()
            add.run(n=8, inputs={"src": np.arange(8, dtype=np.float32)}, params={"k": 0.0})  # uploads into the pool
    np.testing.assert_array_equal(abi.read(x), np.full(8, 101.0, np.float32))


def test_a_batch_never_hands_a_dropped_intermediate_to_a_later_upload():
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    with abi.batch():
        a = add.run(n=8, inputs={"src": np.zeros(8, np.float32)}, params={"k": 100.0}).outputs["dst"]
        b = add.run(n=8, inputs={"src": a}, params={"k": 1.0}).outputs["dst"]
        b2 = add.run(n=8, inputs={"src": b}, params={"k": 1.0}).outputs["dst"]  # nothing refers to a now
        del a  # its buffer must stay out of the pool until the batch is submitted
        gc.collect()
        src = np.arange(64, dtype=np.float32)
        c = make("t13/where", WHERE_YAML, WHERE_WGSL).run(n=64, inputs={"src": src}).outputs["dst"]  # an upload
    np.testing.assert_array_equal(abi.read(b), np.full(8, 101.0, np.float32))
    np.testing.assert_array_equal(abi.read(b2), np.full(8, 102.0, np.float32))
    np.testing.assert_array_equal(abi.read(c), np.where(src > 5, src, 0))


def test_reading_inside_a_batch_answers_what_was_recorded_before_it():
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    compact = make("t13/compact", COMPACT_YAML, COMPACT_WGSL)
    with abi.batch():
        out = add.run(n=4, inputs={"src": np.arange(4, dtype=np.float32)}, params={"k": 2.0}).outputs["dst"]
        np.testing.assert_array_equal(abi.read(out), np.arange(4) + 2.0)
        hits = compact.run(n=6, inputs={"src": np.array([1, -1, 2, -1, 3, 4], np.float32)}).outputs["kept"]
        assert hits.count == 4
    assert hits.count == 4


def test_read_of_an_output_buffer_answers_its_live_elements_and_a_foreign_buffer_all_of_it():
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    run = add.run(n=5, inputs={"src": np.arange(5, dtype=np.float32)}, params={"k": 1.0})
    assert run.outputs["dst"].buffer.size > 5 * 4  # pooled with slack
    np.testing.assert_array_equal(abi.read(run.outputs["dst"].buffer), np.arange(5) + 1.0)
    foreign = get_context().device.create_buffer_with_data(data=np.arange(6, dtype=np.float32), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    np.testing.assert_array_equal(abi.read(foreign), np.arange(6, dtype=np.float32))


def test_batch_outputs_and_plain_runs_still_share_the_pool_after_the_batch():
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    pool = add._pool
    with abi.batch():
        for _ in range(4):
            add.run(n=8, inputs={"src": np.zeros(8, np.float32)}, params={"k": 1.0})
            gc.collect()
    gc.collect()
    before = pool.created
    for _ in range(4):
        add.run(n=8, inputs={"src": np.zeros(8, np.float32)}, params={"k": 1.0})
        gc.collect()
    assert pool.created == before  # parked buffers came back once the batch was submitted




def _other_runs(v, n: int) -> None:
    """Runs alive at once that take every free pooled output of the same size."""
    runs = [v.run(n, inputs={"x": np.full(n, 100.0 + k, np.float32)}, params={"a": 3.0}) for k in range(6)]
    for r in runs:
        abi.read(r.outputs["y"])


def test_a_buffer_handed_out_by_an_output_is_never_pooled_again():
    # output.buffer is the caller's from then on (raw wgpu, abi.read later): dropping the run
    # must not let the pool hand that buffer to a later run, which would overwrite it.
    v = make("defined/escape", AXPY_YAML, AXPY_WGSL)
    n = 256
    xs = np.arange(n, dtype=np.float32)
    run = v.run(n, inputs={"x": xs}, params={"a": 2.0})
    buf = run.outputs["y"].buffer
    del run
    gc.collect()
    _other_runs(v, n)
    np.testing.assert_array_equal(abi.read(buf)[:n], 2.0 * xs + 1.0)


def test_an_append_counter_handed_out_is_never_pooled_again_but_its_elements_are():
    # output.counter is the caller's from then on, as output.buffer is: later runs taking
    # pooled buffers of its size must not overwrite the count it holds. The elements buffer,
    # never handed out, goes back to the pool.
    from engine_plugin.runtime.buffers import pool_for

    compact = make("defined/escape_counter", COMPACT_YAML, COMPACT_WGSL)
    src = np.where(np.arange(40) % 4 == 0, 1.0, -1.0).astype(np.float32)  # 10 kept
    run = compact.run(n=40, inputs={"src": src})
    counter = run.outputs["kept"].counter
    pool = pool_for(get_context())
    free_before = pool.free_count
    del run
    gc.collect()
    assert pool.free_count == free_before + 1  # the elements buffer, not the counter
    many = np.ones(40, np.float32)  # 40 kept: every counter these runs reset and fill says 40
    runs = [compact.run(n=40, inputs={"src": many}) for _ in range(6)]
    assert [r.outputs["kept"].count for r in runs] == [40] * 6
    assert int(abi.read(counter, as_u32=True)[0]) == 10


def test_an_output_given_to_another_run_keeps_its_buffer_when_the_first_run_goes():
    v = make("defined/given", AXPY_YAML, AXPY_WGSL)
    n = 256
    xs = np.arange(n, dtype=np.float32)
    first = v.run(n, inputs={"x": xs}, params={"a": 2.0})
    second = v.run(n, inputs={"x": xs}, params={"a": 5.0}, outputs={"y": first.outputs["y"]})
    del first
    gc.collect()
    _other_runs(v, n)
    np.testing.assert_array_equal(abi.read(second.outputs["y"]), 5.0 * xs + 1.0)


def test_outputs_read_as_outputs_are_still_pooled():
    v = make("defined/pooled", AXPY_YAML, AXPY_WGSL)
    n = 256
    xs = np.arange(n, dtype=np.float32)
    for _ in range(3):  # settle the pool
        abi.read(v.run(n, inputs={"x": xs}, params={"a": 2.0}).outputs["y"])
    gc.collect()
    from engine_plugin.runtime.buffers import pool_for

    pool = pool_for(get_context())
    created = pool.created
    for _ in range(10):
        np.testing.assert_array_equal(abi.read(v.run(n, inputs={"x": xs}, params={"a": 2.0}).outputs["y"]), 2.0 * xs + 1.0)
    assert pool.created == created  # no new buffer: the runs reuse the pool's


def test_a_chain_through_a_domain_count_keeps_its_counters_pooled():
    # The domain count reads its source's counter; that is no hand-out: frame after frame the
    # chain reuses the pool's buffers instead of making new ones.
    from engine_plugin.runtime.buffers import pool_for

    compact = make("t13/compact", COMPACT_YAML, COMPACT_WGSL)
    live = make("t13/live", LIVE_YAML, LIVE_WGSL)
    src = np.where(np.arange(40) % 4 == 0, 1.0, -1.0).astype(np.float32)

    def frame() -> None:
        produced = compact.run(n=40, inputs={"src": src})
        np.testing.assert_array_equal(abi.read(live.run(domain_count=produced.outputs["kept"]).outputs["dst"]), np.ones(10, np.float32))

    for _ in range(5):
        frame()
    gc.collect()
    pool = pool_for(get_context())
    created = pool.created
    for _ in range(5):
        frame()
        gc.collect()
    assert pool.created == created  # each frame took the pool's buffers back


INOUT_YAML = """\
bindings:
  - { name: z, kind: buffer, access: read_write, element: f32 }
params:
  - { name: b, type: f32 }
"""
INOUT_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    z_set(i, z_get(i) + params.b);
}
"""


def test_an_output_given_to_a_read_write_binding_keeps_its_buffer_when_its_run_goes():
    v = make("defined/axpy_inout", AXPY_YAML, AXPY_WGSL)
    w = make("defined/inout", INOUT_YAML, INOUT_WGSL)
    n = 256
    xs = np.arange(n, dtype=np.float32)
    first = v.run(n, inputs={"x": xs}, params={"a": 2.0})
    second = w.run(n, outputs={"z": first.outputs["y"]}, params={"b": 10.0})
    # Another run of w with another buffer: w's repeat state no longer holds first's Output.
    other = get_context().device.create_buffer_with_data(data=np.zeros(n, np.float32), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    w.run(n, outputs={"z": other}, params={"b": 1.0})
    del first
    gc.collect()
    _other_runs(v, n)
    np.testing.assert_array_equal(abi.read(second.outputs["z"]), 2.0 * xs + 11.0)


def test_a_pooled_outputs_fast_constructor_sets_what_init_and_own_pooled_set():
    # Output.pooled is every run's constructor; __init__ + own_pooled the general one. A slot
    # one sets and the other misses would be an AttributeError (or a stale value) in a run.
    from engine_plugin.lowering.types import ValueType  # noqa: F401  (the element's type)
    from engine_plugin.runtime.output import Output, own_pooled

    pool, buf, element = object(), object(), object()
    general = Output(buf, 7, element, name="y", count=7, bits=True)  # type: ignore[arg-type]
    own_pooled(general, pool, (buf,))
    fast = Output.pooled(buf, 7, element, "y", True, pool)  # type: ignore[arg-type]
    slots = [s for s in Output.__slots__ if s != "__weakref__"]
    assert {s: getattr(fast, s) for s in slots} == {s: getattr(general, s) for s in slots}
    general._pool = fast._pool = None  # nothing to give back to a stand-in pool


def test_handing_out_an_append_outputs_buffer_and_counter_on_two_threads_keeps_both_out_of_the_pool():
    # Output.buffer and Output.counter mark what they hand out; on two threads at once
    # neither mark may undo the other (a handed-out buffer back in the pool would be
    # overwritten by a later run). Stand-in pool and buffers; frequent thread switches.
    import sys
    import threading

    from engine_plugin.runtime.output import Output, own_pooled

    class Pool:
        def __init__(self) -> None:
            self.given: list = []

        def give(self, buffer, usage=None) -> None:
            self.given.append(buffer)

    pool, handed_back = Pool(), 0
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(2000):
            buf, counter = object(), object()
            out = Output(buf, 8, None, name="kept", counter=counter, counter_kind="append")  # type: ignore[arg-type]
            own_pooled(out, pool, (buf, counter))
            start = threading.Barrier(2)
            threads = [threading.Thread(target=lambda: (start.wait(), out.buffer)), threading.Thread(target=lambda: (start.wait(), out.counter))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            pool.given.clear()
            del out
            handed_back += len(pool.given)
    finally:
        sys.setswitchinterval(interval)
    assert handed_back == 0


@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_a_copied_output_reads_its_run_and_its_buffer_never_goes_to_two_later_runs(how):
    import copy

    v = make("defined/copy", AXPY_YAML, AXPY_WGSL)
    n = 256
    xs = np.arange(n, dtype=np.float32)
    run = v.run(n, inputs={"x": xs}, params={"a": 2.0})
    twin = copy.copy(run.outputs["y"]) if how == "copy" else copy.deepcopy(run.outputs["y"])
    del run
    gc.collect()
    _other_runs(v, n)  # the original is gone: its buffer must not have gone back to the pool
    np.testing.assert_array_equal(abi.read(twin), 2.0 * xs + 1.0)
    del twin
    gc.collect()
    x = get_context().device.create_buffer_with_data(data=xs, usage=wgpu.BufferUsage.STORAGE)
    first, second = (v.run(n, inputs={"x": x}, params={"a": a}) for a in (10.0, 20.0))
    assert first.outputs["y"]._buffer is not second.outputs["y"]._buffer
    np.testing.assert_array_equal(abi.read(first.outputs["y"]), 10.0 * xs + 1.0)
    np.testing.assert_array_equal(abi.read(second.outputs["y"]), 20.0 * xs + 1.0)


# Review helper 24's defects (this pass): each reproduces a wrong number from the public API.


def test_a_nested_batch_submits_after_the_runs_its_outer_batch_recorded_first():
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    x = np.arange(8, dtype=np.float32)
    for slices in (None, True, False):
        with abi.batch(slices=slices):
            y = add.run(n=8, inputs={"src": x}, params={"k": 1.0}).outputs["dst"]  # recorded in the outer batch
            with abi.batch(slices=slices):
                z = add.run(n=8, inputs={"src": y}, params={"k": 10.0}).outputs["dst"]  # reads y
            w = add.run(n=8, inputs={"src": z}, params={"k": 100.0}).outputs["dst"]  # after the inner batch
        np.testing.assert_array_equal(abi.read(z), x + 11.0)
        np.testing.assert_array_equal(abi.read(w), x + 111.0)


def test_repeating_a_chained_append_output_after_reading_its_count_binds_its_live_elements():
    # The first call binds the whole capacity (the count is still on the GPU); once the count is
    # known, the same call must bind the live elements, as a first call would, not repeat the
    # remembered capacity.
    compact = make("t13/compact", COMPACT_YAML, COMPACT_WGSL)
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    src = np.array([1, -1, 2, -1, 3, -1, -1, -1], np.float32)
    kept = compact.run(n=8, inputs={"src": src}).outputs["kept"]
    add.run(n=8, inputs={"src": kept}, params={"k": 2.0})  # count unknown: bound at capacity
    assert kept.count == 3
    again = add.run(n=8, inputs={"src": kept}, params={"k": 2.0}).outputs["dst"]
    fresh = add.run(n=8, inputs={"src": kept}, params={"k": 2.5}).outputs["dst"]
    np.testing.assert_array_equal(np.sort(abi.read(again)), np.array([3.0, 4.0, 5.0], np.float32))
    np.testing.assert_array_equal(np.sort(abi.read(fresh)), np.array([3.5, 4.5, 5.5], np.float32))


ADD_INTO_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: z, kind: buffer, access: read_write, element: f32 }
params:
  - { name: a, type: f32 }
"""
ADD_INTO_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    z_set(i, z_get(i) + params.a * x_get(i));
}
"""
TO_I32_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: i32, count: "len(x)" }
"""
TO_I32_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, i32(x_get(i)));
}
"""


@pytest.mark.parametrize("batched", [False, True])
def test_an_inout_binding_given_host_data_answers_an_output_no_later_run_overwrites(batched):
    inout = make("t13/inout", ADD_INTO_YAML, ADD_INTO_WGSL)
    to_i32 = make("t13/to_i32", TO_I32_YAML, TO_I32_WGSL)
    z0 = np.arange(16, dtype=np.float32)
    if batched:
        with abi.batch():
            z = inout.run(16, inputs={"x": np.ones(16, np.float32), "z": z0}, params={"a": 1.0}).outputs["z"]
    else:
        z = inout.run(16, inputs={"x": np.ones(16, np.float32), "z": z0}, params={"a": 1.0}).outputs["z"]
    np.testing.assert_array_equal(abi.read(z), z0 + 1.0)
    for _ in range(3):  # later runs of host data take buffers from the same pool
        to_i32.run(16, inputs={"x": np.full(16, 5, np.float32)})
        inout.run(16, inputs={"x": np.full(16, 9, np.float32), "z": np.zeros(16, np.float32)}, params={"a": 1.0})
    np.testing.assert_array_equal(abi.read(z), z0 + 1.0)


def test_an_inout_binding_given_an_output_of_another_type_is_refused_not_written_in_a_copy():
    # Converting by value would write the kernel's result into a temporary copy: the caller's
    # output would not change, and the answered one would live in a recycled buffer.
    from engine_plugin.errors import DispatchError

    inout = make("t13/inout", ADD_INTO_YAML, ADD_INTO_WGSL)
    ints = make("t13/to_i32", TO_I32_YAML, TO_I32_WGSL).run(8, inputs={"x": np.arange(8, dtype=np.float32)}).outputs["y"]
    with pytest.raises(DispatchError, match="'z'"):
        inout.run(8, inputs={"x": np.ones(8, np.float32), "z": ints}, params={"a": 100.0})
    np.testing.assert_array_equal(abi.read(ints), np.arange(8, dtype=np.int32))


def test_a_prepared_run_keeps_the_outputs_it_chains_until_it_is_submitted():
    from engine_plugin.runtime.submission import Submission

    axpy = make("t13/axpy_prepared", AXPY_YAML, AXPY_WGSL)
    ctx = get_context()
    n = 16
    x = axpy.run(n, inputs={"x": np.arange(n, dtype=np.float32)}, params={"a": 1.0}).outputs["y"]
    abi.read(x)
    area = ctx.device.create_buffer(size=axpy.results_bytes(n, {"a": 10.0}, {"x": n}), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    prepared = axpy.prepare(n, inputs={"x": x}, params={"a": 10.0}, results=area)
    del x  # the prepared run reads it: its buffer must stay out of the pool
    gc.collect()
    # Later runs take buffers from the pool (uploads and outputs), kept so none goes back.
    later = [axpy.run(n, inputs={"x": np.full(n, 1000, np.float32)}, params={"a": float(k)}).outputs["y"] for k in range(8)]
    sub = Submission()
    for record in prepared.records:
        sub.add(record)
    sub.submit(ctx.device, ctx.queue, ctx.guard, "test")
    prepared.submitted()
    placed = prepared.layout["y"]
    got = np.frombuffer(ctx.queue.read_buffer(area), np.float32)[placed.offset // 4 : placed.offset // 4 + n]
    np.testing.assert_array_equal(got, 10.0 * (np.arange(n, dtype=np.float32) + 1.0) + 1.0)
    for k, out in enumerate(later):
        np.testing.assert_array_equal(abi.read(out), np.full(n, 1000.0 * k + 1.0, np.float32))


def test_repeats_rebind_a_chained_output_handed_as_a_buffer_mapping_or_as_a_read_write_output():
    # Review helper 27: the repeat's count check saw only bare Outputs in inputs=; an Output
    # inside {"buffer": ...}, or a read_write Output handed through outputs=, kept its old length.
    compact = make("t13/compact", COMPACT_YAML, COMPACT_WGSL)
    add = make("t13/add", ADD_YAML, ADD_WGSL)
    src = np.array([1, -1, 2, -1, 3, -1, -1, -1], np.float32)
    kept = compact.run(n=8, inputs={"src": src}).outputs["kept"]
    wrapped = {"src": {"buffer": kept}}
    add.run(n=8, inputs=wrapped, params={"k": 2.0})  # count unknown: bound at capacity
    assert kept.count == 3
    again = add.run(n=8, inputs=wrapped, params={"k": 2.0}).outputs["dst"]
    np.testing.assert_array_equal(np.sort(abi.read(again)), np.array([3.0, 4.0, 5.0], np.float32))

    inc = make("t13/inc", "bindings:\n  - { name: z, kind: buffer, access: read_write, element: f32 }\n",
               "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
               "    let i = zero_index(gid);\n    if (i >= z_len()) { return; }\n    z_set(i, z_get(i) + 100.0);\n}\n")
    big = make("t13/compact16", COMPACT_YAML.replace('capacity: "len(src)"', 'capacity: "16"'), COMPACT_WGSL)
    kept = big.run(n=8, inputs={"src": src}).outputs["kept"]
    assert kept.count == 3
    inc.run(n=16, outputs={"z": kept})  # +100 on the 3 live elements
    big.run(n=8, inputs={"src": src}, outputs={"kept": kept})  # appends 3 more
    assert kept.count == 6
    z = inc.run(n=16, outputs={"z": kept}).outputs["z"]  # the same call again: all 6 now
    assert z.count == 6
    np.testing.assert_array_equal(np.sort(abi.read(kept)), np.array([101, 102, 103, 201, 202, 203], np.float32))


def test_a_prepared_run_keeps_its_domain_count_snapshot_until_it_is_submitted():
    # Review helper 37: the prepared run's snapshot counter went back to the pool at prepare();
    # a run meanwhile took it and wrote its own limit into it (the prepared run clamped to 2).
    from runtime_kernels import DOUBLE_LIVE_WGSL, DOUBLE_LIVE_YAML, FILTER_WGSL, FILTER_YAML

    from engine_plugin.runtime.submission import Submission

    gpu = get_context()
    src = np.ones(100, np.float32)
    filt = make("t13/filter", FILTER_YAML, FILTER_WGSL)
    live = make("t13/double_live", DOUBLE_LIVE_YAML, DOUBLE_LIVE_WGSL)
    kept = filt.run(n=100, inputs={"src": src}, params={"threshold": 0.5, "cap": 100}).outputs["hits"]
    over = filt.run(n=100, inputs={"src": src}, params={"threshold": 0.5, "cap": 2}).outputs["hits"]
    area = gpu.device.create_buffer(size=4096, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    prepared = live.prepare(64, {"src": src}, None, domain_count=kept, results=area)
    other = live.run(n=64, inputs={"src": src}, domain_count=over).outputs["dst"]  # a run meanwhile
    sub = Submission()
    for record in prepared.records:
        sub.add(record)
    sub.submit(gpu.device, gpu.queue, gpu.guard, "test")
    prepared.submitted()
    placed = prepared.layout["dst"]
    got = np.frombuffer(gpu.queue.read_buffer(area), dtype="<f4")[placed.offset // 4 : placed.offset // 4 + 64]
    assert int((got == 2.0).sum()) == 64
    assert other.count == 2


def test_a_pooled_buffer_wgpu_released_afterwards_is_never_handed_out_again():
    # Review helper 86: an Output and its buffer dying in one garbage cycle run their
    # finalisers in the collector's order; the Output's first pooled the buffer, then the
    # buffer's own released it, and the next run bound a freed buffer: the process aborted.
    from engine_plugin.runtime.buffers import pool_for, size_class

    pool = pool_for(get_context())
    size = size_class(4096 + 4)  # a class no other test leaves buffers in
    doomed = pool.take_class(size)
    pool.give(doomed)  # the Output's finaliser first...
    doomed._release()  # ...then the buffer's own
    taken = pool.take_class(size)
    assert taken is not doomed and taken._internal is not None
    v = make("t86/axpy", AXPY_YAML, AXPY_WGSL)
    np.testing.assert_array_equal(abi.read(v.run(n=4, inputs={"x": np.ones(4, np.float32)}, params={"a": 2.0}).outputs["y"]), np.full(4, 3.0, np.float32))
