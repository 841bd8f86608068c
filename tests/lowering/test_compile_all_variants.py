"""Every lowered variant compiles on the real device: shader module, explicit layout, pipeline.

The cross product of every sample asset under ``assets/`` and of the synthetic
``every_kind`` asset (every binding kind and flag, as float_order and as exact) is lowered and
handed to wgpu (lavapipe in CI). No lowered output is only string-compared: a variant passes
when wgpu accepts its module and a compute pipeline over a bind group layout built from
``lowered.bindings`` (never ``layout="auto"``). The number validated is reported at the end
of the run (see conftest.py).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import wgpu

from engine_plugin.lowering import VariantSpec, lower, parse
from engine_plugin.lowering.types import parse_value_type

from lowering_support import (
    VALIDATED,
    WGPU_POSITION,
    Asset,
    compile_lowered,
    declared_bindings,
    every_kind_assets,
    sample_assets,
)

pytestmark = pytest.mark.gpu

ASSETS = sample_assets() + every_kind_assets()
CASES = [(a, v) for a in ASSETS for v in a.variants()]


def _excerpt(lowered, message: str) -> str:
    """The lowered lines around the first position wgpu names, and where they come from."""
    m = WGPU_POSITION.search(message)
    if not m:
        return lowered.numbered_source()
    line = int(m.group(1))
    rows = lowered.numbered_source().split("\n")[max(0, line - 6) : line + 5]
    return f"lowered line {line} comes from {lowered.source_map.locate(line, int(m.group(2)))}:\n" + "\n".join(rows)


def test_the_samples_under_assets_are_all_found():
    ids = {a.id for a in sample_assets()}
    assert {"reference", "particles"} <= ids
    assert sum(1 for a, _ in CASES if a.id == "reference") == 25


@pytest.mark.parametrize("asset,variant", CASES, ids=[f"{a.id}[{v.label()}]" for a, v in CASES])
def test_every_variant_compiles_with_an_explicit_layout(gpu, asset: Asset, variant: VariantSpec):
    lowered = asset.lower(variant)
    refused = None
    try:
        compile_lowered(gpu.device, lowered)
    except wgpu.GPUValidationError as exc:
        refused = str(exc)
    if refused is not None:
        pytest.fail(f"wgpu refused {asset.id} {variant.label()}:\n{refused}\n{_excerpt(lowered, refused)}", pytrace=False)
    VALIDATED[asset.id] = VALIDATED.get(asset.id, 0) + 1

    # The plan the host binds by is exactly what the source declares: group 0, numbered
    # 0..N-1 in plan order, the params uniform last.
    declared = declared_bindings(lowered.source)
    assert [(g, b, name) for g, b, _, name, _ in declared] == [(0, lb.binding, lb.name) for lb in lowered.bindings]
    assert [lb.binding for lb in lowered.bindings] == list(range(len(lowered.bindings)))
    spaces = {"uniform": "uniform", "storage": "storage, read_write", "read-only-storage": "storage, read"}
    for (_, _, space, _, type_), lb in zip(declared, lowered.bindings):
        assert space == spaces[lb.buffer_type], lb
        assert type_ == lb.storage_type, lb
    assert lowered.bindings[-1].name == "params" and lowered.bindings[-1].buffer_type == "uniform"
    assert lowered.params.binding == lowered.bindings[-1].binding


# ---------------------------------------------------------------- what every_kind exercises
def _every_kind(det: str) -> Asset:
    return next(a for a in every_kind_assets() if a.id.endswith(det))


def test_every_kind_covers_each_binding_kind_and_flag():
    schema = _every_kind("float_order").schema
    kinds = {b.kind for b in schema.bindings}
    assert kinds == {"buffer", "columns", "page", "column", "domain_count"}
    buffers = [b for b in schema.bindings if b.kind == "buffer"]
    assert {b.access for b in buffers} == {"read", "read_write"}
    for flag in ("bits", "atomic", "append", "live"):
        assert any(getattr(b, flag) for b in buffers), flag
    assert {b.element for b in buffers if b.atomic} == {"u32", "i32", "f32"}
    assert any(b.when is not None for b in schema.bindings)
    assert {p.type for p in schema.params} == {
        f"vec{n}<{s}>" if n > 1 else s for n in (1, 2, 3, 4) for s in ("f32", "i32", "u32")
    }
    assert schema.workgroup == (8, 8, 1)
    pages = {b.name: b for b in schema.bindings if b.kind == "page"}
    assert any(p.atomic for p in pages.values()) and any(not p.atomic for p in pages.values())
    column_elements = {b.element for b in schema.bindings if b.kind == "column"}
    assert {"f32", "i32", "u32", "vec2<f32>", "vec3<f32>", "vec4<f32>", "vec2<i32>", "vec3<i32>", "vec4<u32>"} <= column_elements
    type_options = set(schema.spec_param("T").options)
    assert {"f32", "i32", "u32", "vec2<f32>", "vec3<f32>", "vec4<f32>", "vec4<i32>"} <= type_options


def test_append_is_generated_for_float_order_only():
    float_order = _every_kind("float_order").lower({"T": "vec3<f32>", "COUNT": "plain", "MODE": "a", "EXPR": "v"})
    exact = _every_kind("exact").lower({"T": "vec3<f32>", "COUNT": "plain", "MODE": "a", "EXPR": "v"})
    assert "fn hits_append(zero_v: vec3<f32>) -> u32" in float_order.source
    assert "hits_append" not in exact.source
    for lowered in (float_order, exact):
        for fn in ("hits_store", "hits_set_count", "hits_count_value", "hits_capacity"):
            assert f"fn {fn}(" in lowered.source


def test_every_atomic_op_is_generated_for_one_lane_atomic_words():
    lowered = _every_kind("float_order").lower({"T": "f32", "COUNT": "plain", "MODE": "a", "EXPR": "v"})
    ops = {
        "u32": ("exchange", "min", "max", "add", "and", "or", "xor"),
        "i32": ("exchange", "min", "max", "add", "and", "or", "xor"),
        "f32": ("exchange", "min", "max", "add"),
    }
    for prefix in ("a", "b_"):  # atomic buffers au/ai/af and atomic-page columns b_u32/b_i32/b_f32
        for scalar, names in ops.items():
            name = f"a{scalar[0]}" if prefix == "a" else f"b_{scalar}"
            for op in names:
                assert f"fn {name}_atomic_{op}(zero_i: u32, zero_v: {scalar}) -> {scalar}" in lowered.source, (name, op)
            for op in {"and", "or", "xor"} - set(names):
                assert f"fn {name}_atomic_{op}(" not in lowered.source
    # a multi-lane column and a read column of the atomic page get no atomic ops
    assert "fn b_v3f_atomic_" not in lowered.source and "fn b_ro_atomic_" not in lowered.source
    assert "atomicCompareExchangeWeak(&PB[zero_b]" in lowered.source  # f32 add is a CAS loop


# ----------------------------------------------------------------------- params layout
PARAMS_YAML = """\
bindings:
  - { name: out, kind: buffer, access: read_write, element: u32, count: "64" }
params:
  - { name: p_u,   type: u32 }
  - { name: p_v3f, type: vec3<f32> }
  - { name: p_f,   type: f32 }
  - { name: p_v2i, type: vec2<i32> }
  - { name: p_i,   type: i32 }
  - { name: p_v4u, type: vec4<u32> }
  - { name: p_v3i, type: vec3<i32> }
  - { name: p_v2f, type: vec2<f32> }
  - { name: p_v2u, type: vec2<u32> }
  - { name: p_v3u, type: vec3<u32> }
  - { name: p_v4f, type: vec4<f32> }
  - { name: p_v4i, type: vec4<i32> }
workgroup: 1
"""
# WGSL uniform rules by hand: a scalar aligns to 4, vec2 to 8, vec3 and vec4 to 16; a vec3 is
# 12 bytes, so the f32 after it packs into its last word.
EXPECTED_OFFSETS = {
    "n": 0, "zero_nx": 4, "zero_ny": 8, "zero_nz": 12, "zero_gx": 16, "zero_gy": 20, "zero_gz": 24,
    "zero_px": 28, "zero_py": 32, "p_u": 36, "p_v3f": 48, "p_f": 60, "p_v2i": 64,
    "p_i": 72, "p_v4u": 80, "p_v3i": 96, "p_v2f": 112, "p_v2u": 120, "p_v3u": 128, "p_v4f": 144,
    "p_v4i": 160, "zero_len_out": 176,
}


def _params_body(fields) -> str:
    lines = ["@compute @workgroup_size(1)", "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {"]
    k = 0
    for f in fields:
        vt = parse_value_type(f.type)
        for lane in range(vt.lanes):
            access = f"params.{f.name}" + (f".{'xyzw'[lane]}" if vt.lanes > 1 else "")
            word = access if vt.scalar == "u32" else f"bitcast<u32>({access})"
            lines.append(f"    out_set({k}u, {word});")
            k += 1
    lines.append("}")
    return "\n".join(lines) + "\n"


def test_params_layout_follows_wgsl_uniform_rules():
    schema = parse(PARAMS_YAML, "params.yaml")
    lowered = lower(schema, "@compute @workgroup_size(1)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {}\n", {})
    layout = lowered.params
    assert {f.name: f.offset for f in layout.fields} == EXPECTED_OFFSETS
    assert layout.fields[0].name == "n" and layout.fields[0].type == "u32"
    assert {f.name: f.size for f in layout.fields}["p_v3f"] == 12
    assert layout.size == 192 and layout.size % 16 == 0
    for f in layout.fields:
        assert f.offset % parse_value_type(f.type).uniform_align == 0, f


def test_params_layout_is_the_one_the_device_reads(gpu):
    """Pack a uniform by ``lowered.params`` offsets; the kernel copies every lane out as words."""
    schema = parse(PARAMS_YAML, "params.yaml")
    fields = [f for f in lower(schema, "@compute @workgroup_size(1)\nfn main() {}\n", {}).params.fields]
    lowered = lower(schema, _params_body(fields), {})
    device = gpu.device
    pipeline = compile_lowered(device, lowered)

    blob = bytearray(lowered.params.size)
    expected = []
    # The generated entry point loops over zero_gx * zero_gy * zero_gz logical workgroups: a
    # value of hundreds each made one invocation loop 210 million times, minutes on the H200
    # under load (it "hung" there under xdist). Small distinct counts keep every offset checked.
    group_counts = {"zero_gx": 2, "zero_gy": 3, "zero_gz": 5}
    for i, f in enumerate(lowered.params.fields):
        vt = parse_value_type(f.type)
        for lane in range(vt.lanes):
            value = group_counts.get(f.name, (i + 1) * 100 + lane)
            fmt = {"u32": "<I", "i32": "<i", "f32": "<f"}[vt.scalar]
            value = -value if vt.scalar == "i32" else value + 0.5 if vt.scalar == "f32" else value
            struct.pack_into(fmt, blob, f.offset + 4 * lane, value)
            expected.append(struct.unpack("<I", struct.pack(fmt, value))[0])
    usage = wgpu.BufferUsage
    out = device.create_buffer(size=64 * 4, usage=usage.STORAGE | usage.COPY_SRC)
    uniform = device.create_buffer_with_data(data=bytes(blob), usage=usage.UNIFORM)
    bind_group = device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[
            {"binding": 0, "resource": {"buffer": out, "offset": 0, "size": out.size}},
            {"binding": 1, "resource": {"buffer": uniform, "offset": 0, "size": uniform.size}},
        ],
    )
    encoder = device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, bind_group)
    cpass.dispatch_workgroups(1)
    cpass.end()
    device.queue.submit([encoder.finish()])
    words = np.frombuffer(device.queue.read_buffer(out), dtype="<u4")[: len(expected)]
    assert words.tolist() == expected


# --------------------------------------------------------------- focused compile checks
def _compile_message(gpu, lowered) -> str | None:
    try:
        compile_lowered(gpu.device, lowered)
    except wgpu.GPUValidationError as exc:
        return str(exc).strip().split("\n")[-1].strip() or str(exc)
    return None


@pytest.mark.parametrize("scalar,op", [("i32", "min"), ("i32", "max"), ("f32", "add"), ("f32", "min"), ("f32", "max")])
@pytest.mark.parametrize("where", ["buffer", "page-column"])
def test_compare_and_swap_atomics_compile(gpu, where, scalar, op):
    """i32 min/max and f32 add/min/max are CAS loops; each must be valid WGSL on its own."""
    if where == "buffer":
        text = f'bindings:\n  - {{ name: acc, access: read_write, element: {scalar}, atomic: true, count: "n" }}\nworkgroup: 1\n'
    else:
        text = (
            "bindings:\n  - { name: P, kind: page, access: read_write, atomic: true }\n"
            f"  - {{ name: acc, kind: column, page: P, element: {scalar} }}\nworkgroup: 1\n"
        )
    text += "determinism: float_order\n"  # f32 add depends on the order (exact refuses it)
    one = "1.0" if scalar == "f32" else "1"
    body = f"@compute @workgroup_size(1)\nfn main() {{\n    _ = acc_atomic_{op}(0u, {one});\n}}\n"
    lowered = lower(parse(text), body, {})
    assert _compile_message(gpu, lowered) is None, _compile_message(gpu, lowered)


VECTOR_ADD_YAML = """\
bindings:
  - { name: a, kind: buffer, element: f32 }
  - { name: b, kind: buffer, element: f32 }
  - { name: c, kind: buffer, access: read_write, element: f32, count: "len(a)" }
"""
VECTOR_ADD_BODY = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    c_set(i, a_get(i) + b_get(i));
}
"""


def test_the_vector_add_kernel_over_bindings_a_b_c_compiles_and_adds(gpu):
    """The first kernel anyone writes: c = a + b. Binding names are the user's to choose."""
    from lowering_support import run_once

    lowered = lower(parse(VECTOR_ADD_YAML), VECTOR_ADD_BODY, {})
    assert _compile_message(gpu, lowered) is None, _compile_message(gpu, lowered)
    a = np.arange(8, dtype="<f4")
    b = np.full(8, 0.5, dtype="<f4")
    params = {"n": 8, "zero_len_a": 8, "zero_len_b": 8, "zero_len_c": 8}
    out = run_once(gpu.device, lowered, {"a": a, "b": b, "c": 8}, params)
    assert out["c"].view("<f4").tolist() == (a + b).tolist()


# Names the generated accessors use for their own locals and parameters. A binding may take
# any of them: the accessor must still reach the binding, not a local that shadows it.
ACCESSOR_LOCALS = ["a", "b", "c", "i", "k", "v", "w", "lane", "slot", "old", "next", "r"]
NAME_TEMPLATES = {
    "read-buffer": ("  - {{ name: {n}, element: f32 }}\n", ""),
    "read-write-vector-buffer": ('  - {{ name: {n}, access: read_write, element: vec3<f32>, count: "n" }}\n', ""),
    "bits-buffer": ('  - {{ name: {n}, access: read_write, element: vec2<f32>, bits: true, count: "n" }}\n', ""),
    "atomic-u32-buffer": ('  - {{ name: {n}, access: read_write, element: u32, atomic: true, count: "n" }}\n', ""),
    "append-buffer": ('  - {{ name: {n}, access: read_write, element: vec2<f32>, capacity: "n", append: true }}\n', "determinism: float_order\n"),
    "read-write-table": ("  - {{ name: {n}, kind: columns, access: read_write }}\n", ""),
    "page": ("  - {{ name: {n}, kind: page, access: read_write }}\n  - {{ name: {n}_x, kind: column, page: {n}, element: vec3<f32> }}\n", ""),
    "atomic-page": ("  - {{ name: {n}, kind: page, access: read_write, atomic: true }}\n  - {{ name: {n}_x, kind: column, page: {n}, element: u32 }}\n", ""),
    "column": ("  - {{ name: {n}, kind: column, page: PG, element: vec2<i32> }}\n", ""),
}


@pytest.mark.parametrize("kind", sorted(NAME_TEMPLATES))
def test_bindings_named_like_accessor_locals_still_compile(gpu, kind):
    template, tail = NAME_TEMPLATES[kind]
    broken = {}
    for name in ACCESSOR_LOCALS:
        text = "bindings:\n" + ("  - { name: PG, kind: page, access: read_write }\n" if kind == "column" else "")
        text += template.format(n=name) + tail
        lowered = lower(parse(text), VECTOR_ADD_BODY.replace("c_set(i, a_get(i) + b_get(i));", ""), {})
        message = _compile_message(gpu, lowered)
        if message is not None:
            broken[name] = message
    assert not broken, f"{kind} bindings that wgpu refused, by name: {broken}"
