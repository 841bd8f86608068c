"""One behaviour per rule of SPEC §2 (the kernel ABI), asserted on what lowering answers.

Each test names the rule it checks. Malformed inputs live in test_bad_input.py; whole-variant
compilation in test_compile_all_variants.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest
import wgpu

from engine_plugin.errors import LoweringError, SchemaError
from engine_plugin.lowering import VariantSpec, is_extended, lower, parse, resolve_spec
from engine_plugin.lowering.preprocess import apply_when_blocks
from engine_plugin.lowering.schema import KIND_KEYS

from lowering_support import WGPU_POSITION, compile_lowered, run_once, sample

MAIN = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n"


def lowered_line(lowered, text: str) -> int:
    """1-based line of the lowered source whose text is exactly ``text``."""
    lines = lowered.source.split("\n")
    hits = [i for i, line in enumerate(lines, start=1) if line == text]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def user_line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), start=1) if needle in line)


def body_of(lowered) -> list[str]:
    """The lowered lines of the user's body (between the prelude and the generated entry point)."""
    lines = lowered.source.split("\n")
    return lines[lines.index("// ---- kernel body ----") + 1 : lines.index("// ---- generated entry point ----")]


def first_body_line(lowered) -> int:
    return lowered.source.split("\n").index("// ---- kernel body ----") + 2


def as_lowered(user_line: str) -> str:
    """A user line as the lowering leaves it: entry attributes blanked (columns kept), main renamed."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    line = re.sub(r"@compute|@workgroup_size\([^)]*\)|@builtin\([^)]*\)", blank, user_line)
    return line.replace("fn main(", "fn zero_user_main(")


# ------------------------------------------------------------------------ parse: memoised
def test_parse_answers_the_same_schema_object_for_the_same_text():
    text = "bindings:\n  - { name: src, element: f32 }\n"
    first = parse(text)
    assert parse(text) is first
    assert parse(text + "# a comment\n") is not first
    assert parse(text + "# a comment\n") == first  # same content, another text: equal, not identical


def test_a_parsed_schema_is_frozen_and_hashable():
    schema = parse("bindings:\n  - { name: src, element: f32, when: \"T=f32\" }\nspecialize:\n  - { name: T, options: [f32, u32] }\n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        schema.determinism = "float_order"  # type: ignore[misc]
    assert isinstance(schema.bindings, tuple) and isinstance(schema.specialize[0].options, tuple)
    assert hash(schema) == hash(parse(schema.text))


# --------------------------------------------------------------------- keys and kinds
@pytest.mark.parametrize(
    "text,key",
    [
        ("bindings: []\nworkgroups: 64\n", "workgroups"),
        ("bindings:\n  - { name: a, element: f32, acess: read }\n", "acess"),
        ("bindings: []\nparams:\n  - { name: r, type: f32, default: 1 }\n", "default"),
        ("bindings: []\nspecialize:\n  - { name: T, options: [f32], kinds: type }\n", "kinds"),
    ],
    ids=["top-level", "binding", "param", "specialize"],
)
def test_unknown_keys_are_refused_at_their_line(text, key):
    with pytest.raises(SchemaError) as info:
        parse(text, "k.yaml")
    assert f"unknown key {key!r}" in info.value.message
    assert info.value.line == user_line(text, key) and info.value.path == "k.yaml"


_MINIMAL = {
    "buffer": "name: x, kind: buffer, element: f32",
    "columns": "name: x, kind: columns",
    "page": "name: x, kind: page",
    "column": "name: x, kind: column, page: P, element: f32",
    "domain_count": "name: x, kind: domain_count",
    "texture": "name: x, kind: texture",
    "sampler": "name: x, kind: sampler",
    "storage_texture": "name: x, kind: storage_texture, format: r32float",
}
_VALUES = {
    "access": "read", "element": "f32", "count": '"n"', "capacity": '"n"', "live": "true", "append": "true",
    "when": '"T=f32"', "bits": "true", "page": "P", "atomic": "false", "clear": "false",
    "dim": "2d", "sample": "float", "format": "r32float", "filter": "linear", "address": "clamp", "size": "[nx]",
}
_ALL_KEYS = sorted(set().union(*KIND_KEYS.values()) - {"name", "kind"})


@pytest.mark.parametrize(
    "kind,key", [(k, key) for k in _MINIMAL for key in _ALL_KEYS if key not in KIND_KEYS[k]]
)
def test_a_key_that_does_not_apply_to_the_kind_is_refused(kind, key):
    text = (
        "bindings:\n  - { name: P, kind: page }\n"
        f"  - {{ {_MINIMAL[kind]}, {key}: {_VALUES[key]} }}\n"
        "specialize:\n  - { name: T, options: [f32, u32] }\n"
    )
    with pytest.raises(SchemaError) as info:
        parse(text)
    assert f"key {key!r} does not apply to kind {kind}" in info.value.message
    assert info.value.line == 3
    assert info.value.col == text.split("\n")[2].index(f"{key}:") + 1


EVERY_KEY_YAML = """\
bindings:
  - { name: P, kind: page, access: read_write, atomic: true, when: "T=f32|u32" }
  - { name: c, kind: column, page: P, element: u32, access: read_write, when: "T=f32|u32" }
  - { name: t, kind: columns, access: read_write, when: "T=f32" }
  - { name: d, kind: domain_count, when: "T=u32" }
  - { name: a, kind: buffer, access: read_write, element: u32, count: "n", live: true, bits: true, atomic: true, when: "T=f32" }
  - { name: h, kind: buffer, access: read_write, element: T, capacity: "n", append: true, clear: false, when: "T=u32" }
  - { name: tx, kind: texture, dim: 2d, sample: float, when: "T=f32" }
  - { name: sm, kind: sampler, filter: nearest, address: repeat, when: "T=f32" }
  - { name: st, kind: storage_texture, format: r32float, access: write, dim: 2d, size: [nx, ny], when: "T=f32" }
specialize:
  - { name: T, options: [f32, u32] }
"""


def test_every_key_that_applies_to_its_kind_is_accepted():
    schema = parse(EVERY_KEY_YAML)
    used: dict[str, set] = {}
    for b in schema.bindings:
        used.setdefault(b.kind, set()).update(k for k, _, _ in b.key_lines)
    assert used == {kind: set(keys) for kind, keys in KIND_KEYS.items()}


# ------------------------------------------------------------------------ when filtering
WHEN_YAML = """\
bindings:
  - { name: a,      kind: buffer, element: f32 }
  - { name: only_x, kind: buffer, element: f32, when: "M=x" }
  - { name: out,    kind: buffer, access: read_write, element: u32, capacity: "n", append: true, when: "M=y|z" }
  - { name: cnd,    kind: buffer, element: u32, when: "M=x N=p; M=z" }
  - { name: b,      kind: buffer, access: read_write, element: f32, count: "n" }
specialize:
  - { name: M, options: [x, y, z] }
  - { name: N, options: [p, q] }
determinism: float_order
"""


@pytest.mark.parametrize("m,n", list(itertools.product("xyz", "pq")))
def test_when_keeps_a_binding_only_in_the_variants_where_it_holds(m, n):
    lowered = lower(parse(WHEN_YAML), MAIN, {"M": m, "N": n})
    expected = ["a"]
    expected += ["only_x"] if m == "x" else []
    expected += ["out", "out_count"] if m in "yz" else []
    expected += ["cnd"] if (m == "x" and n == "p") or m == "z" else []
    expected += ["b", "params"]
    assert [b.name for b in lowered.bindings] == expected
    # numbering is contiguous, the uniform comes last
    assert [b.binding for b in lowered.bindings] == list(range(len(expected)))
    assert lowered.bindings[-1].buffer_type == "uniform" and lowered.params.binding == len(expected) - 1
    # a binding left out leaves nothing behind: no declaration, no accessor, no params field
    for gone in sorted({"only_x", "out", "cnd"} - set(expected)):
        assert not re.search(rf"\b{gone}\b", lowered.source), gone
        assert lowered.params.field(f"zero_len_{gone}") is None
        assert lowered.slot(gone) is None


def test_the_append_counter_is_bound_right_after_its_buffer():
    lowered = lower(parse(WHEN_YAML), MAIN, {"M": "z", "N": "q"})
    names = [b.name for b in lowered.bindings]
    out, counter = lowered.bindings[names.index("out")], lowered.bindings[names.index("out_count")]
    assert counter.binding == out.binding + 1
    assert counter.role == "counter" and counter.storage_type == "array<atomic<u32>>" and counter.buffer_type == "storage"
    slot = lowered.slot("out")
    assert slot.role == "append" and slot.counter_binding == counter.binding and slot.capacity == "n"


def test_two_bindings_may_share_a_name_when_their_conditions_never_hold_together():
    text = """\
bindings:
  - { name: v, kind: buffer, element: f32, when: "M=x N=p" }
  - { name: v, kind: buffer, access: read_write, element: vec3<f32>, count: "n", when: "M=x N=q; M=y" }
specialize:
  - { name: M, options: [x, y] }
  - { name: N, options: [p, q] }
"""
    schema = parse(text)
    shapes = {}
    for m, n in itertools.product("xy", "pq"):
        (b,) = [b for b in lower(schema, MAIN, {"M": m, "N": n}).bindings if b.name == "v"]
        shapes[m, n] = (b.access, b.lanes)
    assert shapes == {("x", "p"): ("read", 1), ("x", "q"): ("read_write", 3), ("y", "p"): ("read_write", 3), ("y", "q"): ("read_write", 3)}


@pytest.mark.parametrize(
    "first,second",
    [('"M=x|y"', '"M=y N=p"'), ('"M=x N=p; M=y"', '"N=p"'), (None, '"M=x"'), (None, None)],
)
def test_bindings_sharing_a_name_whose_conditions_can_hold_together_are_refused_at_parse(first, second):
    w1 = f", when: {first}" if first else ""
    w2 = f", when: {second}" if second else ""
    text = (
        "bindings:\n"
        f"  - {{ name: v, kind: buffer, element: f32{w1} }}\n"
        f"  - {{ name: v, kind: buffer, element: u32{w2} }}\n"
        "specialize:\n  - { name: M, options: [x, y] }\n  - { name: N, options: [p, q] }\n"
    )
    with pytest.raises(SchemaError) as info:
        parse(text)
    assert info.value.line == 3 and "first on line 2" in info.value.message


# ---------------------------------------------------------------------- // @when blocks
WHEN_BODY = """\
fn pick() -> u32 {
    var r = 0u;
    // @when M x
    r = 1u;
    // @when N p
    r = 2u;
    // @end
    r = r + 10u;
    // @end
    // @when M y z
    r = 3u;
    // @end
    return r;
}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    _ = pick();
}
"""


@pytest.mark.parametrize("m,n", list(itertools.product("xyz", "pq")))
def test_when_blocks_blank_lines_in_place_and_nest(m, n):
    lowered = lower(parse(WHEN_YAML), WHEN_BODY, {"M": m, "N": n})
    user = WHEN_BODY.split("\n")
    body = body_of(lowered)
    assert len(body) == len(user)  # no line added or removed
    kept = {
        4: m == "x",
        6: m == "x" and n == "p",  # nested: needs the outer block too
        8: m == "x",
        11: m in "yz",
    }
    for number, line in enumerate(body, start=1):
        if number in kept:
            assert line == (as_lowered(user[number - 1]) if kept[number] else ""), (number, line)
        else:
            assert line == as_lowered(user[number - 1]), number  # directives and code outside blocks stay
    first = first_body_line(lowered)
    for number in range(1, len(body) + 1):
        span = lowered.source_map.locate(first + number - 1)
        assert span.path == "kernel.wgsl" and span.line == number


def test_apply_when_blocks_keeps_the_line_count_and_the_directives():
    spec = parse(WHEN_YAML).specialize
    lines = WHEN_BODY.split("\n")
    out = apply_when_blocks(lines, {"M": "y", "N": "q"}, {s.name: s for s in spec}, "k.wgsl")
    assert len(out) == len(lines)
    assert [l for l in out if "@when" in l or "@end" in l] == [l for l in lines if "@when" in l or "@end" in l]


# -------------------------------------------------------------------------- splicing
SPLICE_YAML = """\
bindings:
  - { name: src, kind: buffer, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
specialize:
  - { name: BODY, kind: source, default: "v" }
"""
SPLICE_BODY = """\
// BODY is spliced; BODY_2 and xBODY are other identifiers
/* BODY in a block comment /* nested BODY */ still a comment */
fn BODY_2(BODYx: f32) -> f32 { return BODYx; }
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let v = src_get(i);
    let xBODY = 1.0;
    dst_set(i, BODY + BODY_2(xBODY)); // BODY again in a comment
    let zz = BODY;
}
"""


def test_source_splicing_replaces_whole_identifiers_outside_comments_only():
    lowered = lower(parse(SPLICE_YAML), SPLICE_BODY, {"BODY": "(v * 3.0)"})
    body = body_of(lowered)
    user = SPLICE_BODY.split("\n")
    assert body[0] == user[0] and body[1] == user[1] and body[2] == user[2]  # comments, BODY_2, BODYx
    assert body[8] == "    let xBODY = 1.0;"
    assert body[9] == "    dst_set(i, (v * 3.0) + BODY_2(xBODY)); // BODY again in a comment"
    assert body[10] == "    let zz = (v * 3.0);"


def test_a_source_parameter_takes_its_default():
    lowered = lower(parse(SPLICE_YAML), SPLICE_BODY, {})
    assert lowered.spec.as_dict() == {"BODY": "v"}
    assert "    let zz = v;" in body_of(lowered)


def test_a_multi_line_splice_keeps_every_later_line_mapped_to_its_user_line():
    lowered = lower(parse(SPLICE_YAML), SPLICE_BODY, {"BODY": "(v *\n  3.0)"})
    smap = lowered.source_map
    call_line = user_line(SPLICE_BODY, "dst_set(")
    first = lowered_line(lowered, "    dst_set(i, (v *")
    assert lowered.source.split("\n")[first] == "  3.0) + BODY_2(xBODY)); // BODY again in a comment"
    assert smap.locate(first).line == call_line and smap.locate(first + 1).line == call_line
    zz = lowered_line(lowered, "  3.0);")  # the second row of `let zz = BODY;`
    assert smap.locate(zz).line == user_line(SPLICE_BODY, "let zz")
    closing = max(i for i, text in enumerate(body_of(lowered), start=first_body_line(lowered)) if text == "}")
    assert smap.locate(closing).line == len(SPLICE_BODY.split("\n")) - 1  # the body's last line
    assert smap.locate(closing).text == "}"


def test_columns_after_a_splice_map_back_to_the_users_columns():
    lowered = lower(parse(SPLICE_YAML), SPLICE_BODY, {"BODY": "(v * 3.0)"})
    line = lowered_line(lowered, "    dst_set(i, (v * 3.0) + BODY_2(xBODY)); // BODY again in a comment")
    user = SPLICE_BODY.split("\n")[user_line(SPLICE_BODY, "dst_set(") - 1]
    lowered_text = lowered.source.split("\n")[line - 1]
    after = lowered.source_map.locate(line, lowered_text.index("BODY_2") + 1)
    assert after.col == user.index("BODY_2") + 1
    inside = lowered.source_map.locate(line, lowered_text.index("3.0") + 1)
    assert inside.col == user.index("BODY") + 1  # inside spliced text: the identifier's column
    before = lowered.source_map.locate(line, lowered_text.index("dst_set") + 1)
    assert before.col == user.index("dst_set") + 1


LATER_ROWS_BODY = SPLICE_BODY.replace("dst_set(i, BODY + BODY_2(xBODY));", "dst_set(i, (BODY) + BODY + BODY_2(xBODY));")


@pytest.mark.parametrize("value", ["v\n* 2.0", "v\n*\n2.0", "(v *\n  3.0)"], ids=["two-rows", "three-rows", "indented"])
def test_columns_on_the_later_rows_of_a_multi_line_splice_map_back_to_the_users_columns(value):
    # Review helper 237: only a value's first row was mapped; text after the value on its last
    # row took the generated row's column (kernel.wgsl:6:5 for undefined_x at 6:25).
    lowered = lower(parse(SPLICE_YAML), LATER_ROWS_BODY, {"BODY": value})
    line = user_line(LATER_ROWS_BODY, "dst_set(")
    user = LATER_ROWS_BODY.split("\n")[line - 1]
    body_col = user.index("BODY") + 1
    second_col = user.index("BODY", body_col) + 1
    spans = {n: lowered.source_map.locate(n) for n in range(1, len(lowered.source.split("\n")) + 1)}
    rows = [n for n, span in spans.items() if span is not None and (span.path, span.line) == ("kernel.wgsl", line)]
    texts = [lowered.source.split("\n")[n - 1] for n in rows]
    last = value.split("\n")[-1]
    # The first use's last row, then the second use's: each ends its row's spliced text.
    after_first = next(n for n, t in zip(rows, texts) if t.startswith(last + ") + "))
    after_second = next(n for n, t in zip(rows, texts) if t.startswith(last + " + BODY_2("))
    found = {
        "inside the first use's last row": lowered.source_map.locate(after_first, 1).col,
        "the ') + ' after it": lowered.source_map.locate(after_first, len(last) + 1).col,
        "inside the second use's first row": lowered.source_map.locate(after_first, len(last) + 5).col,
        "inside the second use's last row": lowered.source_map.locate(after_second, 1).col,
        "BODY_2 after it": lowered.source_map.locate(after_second, len(last) + 4).col,
        "a middle row": lowered.source_map.locate(rows[1], 1).col,
    }
    assert found == {
        "inside the first use's last row": body_col,
        "the ') + ' after it": body_col + len("BODY"),
        "inside the second use's first row": second_col,
        "inside the second use's last row": second_col,
        "BODY_2 after it": user.index("BODY_2") + 1,
        "a middle row": body_col,
    }


def test_a_lowering_error_after_a_multi_line_splice_points_at_the_users_column():
    body = LATER_ROWS_BODY.replace("BODY_2(xBODY)", "dpdx(v)")
    with pytest.raises(LoweringError) as info:
        lower(parse(SPLICE_YAML), body, {"BODY": "v\n* 2.0"}, wgsl_path="k/kernel.wgsl")
    user = body.split("\n")[user_line(body, "dst_set(") - 1]
    assert (info.value.span.path, info.value.span.line, info.value.span.col) == ("k/kernel.wgsl", 10, user.index("dpdx") + 1)
    assert info.value.message.startswith("dpdx() takes screen-space derivatives")


@pytest.mark.gpu
def test_a_compiler_error_after_a_multi_line_splice_maps_to_the_users_column(gpu):
    body = LATER_ROWS_BODY.replace("BODY_2(xBODY)", "undefined_x")
    lowered = lower(parse(SPLICE_YAML), body, {"BODY": "v\n* 2.0"}, wgsl_path="k/kernel.wgsl")
    line, col = _compile_error_position(gpu, lowered)
    span = lowered.source_map.locate(line, col)
    user = body.split("\n")[9]
    assert (span.path, span.line, span.col, span.text) == ("k/kernel.wgsl", 10, user.index("undefined_x") + 1, user)


# ---------------------------------------------------------------------- specialisation
SPEC_YAML = """\
bindings:
  - { name: src, kind: buffer, element: T }
specialize:
  - { name: T, options: [f32, vec3f, vec4<i32>] }
  - { name: FOLD, options: [add, min, mean] }
"""


def test_type_options_become_an_alias_and_named_options_consts():
    lowered = lower(parse(SPEC_YAML), MAIN, {"T": "vec3<f32>", "FOLD": "mean"})
    lines = lowered.source.split("\n")
    assert "alias T = vec3<f32>;" in lines
    assert "const FOLD: u32 = 2u;" in lines
    for i, opt in enumerate(("add", "min", "mean")):
        assert f"const FOLD_{opt}: u32 = {i}u;" in lines
    assert "fn src_get(zero_i: u32) -> vec3<f32> { let zero_b = zero_i * 3u; return vec3<f32>(src[zero_b], src[zero_b + 1u], src[zero_b + 2u]); }" in lines


def test_type_values_are_normalised_so_spellings_name_one_variant():
    schema = parse(SPEC_YAML)
    assert schema.spec_param("T").options == ("f32", "vec3<f32>", "vec4<i32>")
    a = resolve_spec(schema, {"T": "vec3f", "FOLD": "add"})
    b = resolve_spec(schema, {"FOLD": "add", "T": "vec3< f32 >"})
    assert a == b == VariantSpec((("FOLD", "add"), ("T", "vec3<f32>")))
    assert lower(schema, MAIN, a).source == lower(schema, MAIN, {"T": "vec3<f32>", "FOLD": "add"}).source


# --------------------------------------------------------------------- storage layout
def test_vec3_buffers_are_flat_scalars_bits_or_atomic_are_u32_words_and_vec2_is_natural():
    text = """\
bindings:
  - { name: v3,  kind: buffer, element: vec3<f32> }
  - { name: raw, kind: buffer, element: f32, bits: true }
  - { name: ai,  kind: buffer, access: read_write, element: i32, atomic: true, count: "n" }
  - { name: out, kind: buffer, access: read_write, element: vec2<i32>, count: "n" }
"""
    lowered = lower(parse(text), MAIN, {})
    by = {b.name: b for b in lowered.bindings}
    assert (by["v3"].storage_type, by["v3"].lanes, by["v3"].buffer_type) == ("array<f32>", 3, "read-only-storage")
    assert by["raw"].storage_type == "array<u32>"
    assert by["ai"].storage_type == "array<atomic<u32>>"
    # vec2/vec4 are declared as themselves (issue 15): one access an element, same host layout
    assert (by["out"].storage_type, by["out"].lanes, by["out"].buffer_type) == ("array<vec2<i32>>", 2, "storage")
    src = lowered.source
    assert "fn raw_get(zero_i: u32) -> f32 { let zero_b = zero_i; return bitcast<f32>(raw[zero_b]); }" in src
    assert "fn ai_get(zero_i: u32) -> i32 { let zero_b = zero_i; return bitcast<i32>(atomicLoad(&ai[zero_b])); }" in src
    assert "fn v3_set(" not in src and "fn raw_set(" not in src  # access: read has no setter
    assert "fn out_set(zero_i: u32, zero_v: vec2<i32>) { out[zero_i] = zero_v; }" in src
    for name in ("v3", "raw", "ai", "out"):
        assert f"fn {name}_len() -> u32 {{ return params.zero_len_{name}; }}" in src


def test_params_struct_starts_with_n_and_shows_user_params_by_name():
    text = "bindings:\n  - { name: src, element: f32 }\nparams:\n  - { name: radius, type: f32 }\n  - { name: dir, type: vec3<f32> }\n"
    lowered = lower(parse(text), MAIN, {})
    assert lowered.params.fields[0].name == "n"
    struct = lowered.source.split("struct ZeroParams {\n")[1].split("}")[0]
    assert struct.split("\n")[0] == "    n: u32,"
    assert "    radius: f32," in struct and "    dir: vec3<f32>," in struct
    assert "var<uniform> params: ZeroParams;" in lowered.source


def test_live_output_and_host_slots_name_what_the_host_supplies():
    text = """\
bindings:
  - { name: cols, kind: columns }
  - { name: src,  kind: buffer, element: f32 }
  - { name: io,   kind: buffer, access: read_write, element: u32 }
  - { name: dst,  kind: buffer, access: read_write, element: f32, count: "n", live: true }
  - { name: dom,  kind: domain_count }
  - { name: P,    kind: page, access: read_write, atomic: true }
  - { name: h,    kind: column, page: P, element: u32 }
"""
    lowered = lower(parse(text), MAIN, {})
    roles = {s.name: s.role for s in lowered.host_slots}
    assert roles == {"cols": "table", "src": "input", "io": "inout", "dst": "output", "dom": "domain_count", "P": "page"}
    assert lowered.slot("dst").live and lowered.slot("dst").count == "n"
    assert lowered.slot("P").atomic
    assert lowered.domain_count == "dom"
    assert [c.name for c in lowered.columns] == ["h"] and lowered.column("h").page == "P"
    assert {f.name for f in lowered.params.fields} >= {"col_base_h", "col_len_h"}


# ------------------------------------------------------------------------ zero_n / index
ZERO_YAML = """\
bindings:
  - { name: out, kind: buffer, access: read_write, element: u32, count: "4" }
  - { name: dom, kind: domain_count, when: "COUNT=device" }
specialize:
  - { name: COUNT, options: [plain, device] }
workgroup: 1
"""
ZERO_BODY = """\
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    out_set(0u, zero_n());
    out_set(1u, zero_index(vec3<u32>(3u, 2u, 1u)));
}
"""


@pytest.mark.gpu
def test_zero_n_answers_the_domain_count_when_the_variant_has_one(gpu):
    plain = lower(parse(ZERO_YAML), ZERO_BODY, {"COUNT": "plain"})
    device = lower(parse(ZERO_YAML), ZERO_BODY, {"COUNT": "device"})
    assert "fn zero_n() -> u32 { return params.n; }" in plain.source
    assert "fn zero_n() -> u32 { return min(dom[0], params.n); }" in device.source
    params = {"n": 10, "zero_nx": 100, "zero_ny": 100, "zero_nz": 2}
    assert run_once(gpu.device, plain, {"out": 4}, params)["out"][:2].tolist() == [10, 3 + 100 * (2 + 100 * 1)]
    got = run_once(gpu.device, device, {"out": 4, "dom": np.array([3], "<u4")}, params)["out"]
    assert got[:2].tolist() == [3, 3 + 100 * (2 + 100 * 1)]  # the live count, never past n
    outside = run_once(gpu.device, plain, {"out": 4}, {**params, "zero_nz": 1})["out"]
    assert outside[1] == 0xFFFFFFFF  # a coordinate outside the domain has no linear index


# ------------------------------------------------------------------------ pages / columns
def _pages(count: int) -> str:
    lines = ["bindings:"]
    for i in range(count):
        lines.append(f"  - {{ name: P{i}, kind: page, access: read_write }}")
        lines.append(f"  - {{ name: c{i}, kind: column, page: P{i}, element: u32 }}")
    return "\n".join(lines) + "\n"


@pytest.mark.gpu
def test_eight_pages_bind_in_one_kernel_and_a_ninth_is_refused(gpu):
    lowered = lower(parse(_pages(8)), MAIN, {})
    assert [b.name for b in lowered.bindings] == [f"P{i}" for i in range(8)] + ["params"]
    compile_lowered(gpu.device, lowered)
    text = _pages(9)
    with pytest.raises(SchemaError) as info:
        parse(text)
    assert info.value.line == user_line(text, "name: P8,") and "ninth page" in info.value.message


def test_a_page_declared_twice_under_exclusive_conditions_counts_once():
    text = _pages(7) + (
        '  - { name: P7, kind: page, access: read_write, when: "M=a" }\n'
        '  - { name: P7, kind: page, access: read, when: "M=b" }\n'
        "  - { name: c7, kind: column, page: P7, element: u32, access: read }\n"
        "specialize:\n  - { name: M, options: [a, b] }\n"
    )
    schema = parse(text)  # eight page names, however many declarations
    for m, access in (("a", "read_write"), ("b", "read")):
        (p7,) = [b for b in lower(schema, MAIN, {"M": m}).bindings if b.name == "P7"]
        assert p7.access == access


@pytest.mark.parametrize(
    "page,column_access,expected",
    [("read_write", None, "read_write"), ("read", None, "read"), ("read_write", "read", "read"), ("read_write", "read_write", "read_write")],
)
def test_a_columns_default_access_follows_its_page(page, column_access, expected):
    access = f", access: {column_access}" if column_access else ""
    text = f"bindings:\n  - {{ name: P, kind: page, access: {page} }}\n  - {{ name: c, kind: column, page: P, element: vec2<f32>{access} }}\n"
    (col,) = [b for b in parse(text).bindings if b.kind == "column"]
    assert col.access == expected
    lowered = lower(parse(text), MAIN, {})
    assert lowered.column("c").access == expected
    assert ("fn c_set(" in lowered.source) == (expected == "read_write")
    assert ("fn c_set_word(" in lowered.source) == (expected == "read_write")


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["read-first", "read_write-first"])
def test_a_columns_default_access_follows_the_page_of_its_variant(gpu, order):
    """A page name declared per variant: the column takes the access of the page it stands in there."""
    pages = ['  - { name: P, kind: page, access: read, when: "M=a" }\n', '  - { name: P, kind: page, access: read_write, when: "M=b" }\n']
    if order != "read-first":
        pages.reverse()
    text = "bindings:\n" + "".join(pages) + "  - { name: c, kind: column, page: P, element: u32 }\nspecialize:\n  - { name: M, options: [a, b] }\n"
    schema = parse(text)
    for m, access in (("a", "read"), ("b", "read_write")):
        lowered = lower(schema, MAIN, {"M": m})
        assert lowered.column("c").access == access, (m, lowered.column("c"))
        assert ("fn c_set(" in lowered.source) == (access == "read_write")
        compile_lowered(gpu.device, lowered)


def test_a_column_on_an_atomic_page_takes_the_pages_read_write_access():
    text = "bindings:\n  - { name: P, kind: page, access: read_write, atomic: true }\n  - { name: h, kind: column, page: P, element: i32 }\n"
    lowered = lower(parse(text), MAIN, {})
    assert lowered.column("h").access == "read_write"
    assert "fn h_atomic_add(zero_i: u32, zero_v: i32) -> i32" in lowered.source


CLAMP_YAML = """\
bindings:
  - { name: P,   kind: page, access: read_write }
  - { name: c,   kind: column, page: P, element: vec2<u32> }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "8" }
workgroup: 1
"""
CLAMP_BODY = """\
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let inside = c_get(1u);
    let past = c_get(10u);
    out_set(0u, inside.x);
    out_set(1u, inside.y);
    out_set(2u, past.x);
    out_set(3u, past.y);
    out_set(4u, c_word(100u));
    out_set(5u, c_len());
    c_set(9u, vec2<u32>(7u, 8u));
}
"""


@pytest.mark.gpu
def test_a_column_index_past_its_length_reaches_its_last_element(gpu):
    lowered = lower(parse(CLAMP_YAML), CLAMP_BODY, {})
    page = np.arange(100, 120, dtype="<u4")
    # the run: 3 elements of 2 words from word 4 (words 4..9)
    got = run_once(gpu.device, lowered, {"P": page, "out": 8}, {"n": 1, "col_base_c": 4, "col_len_c": 3, "zero_len_out": 8})
    assert got["out"][:6].tolist() == [106, 107, 108, 109, 109, 3]
    expected_page = page.copy()
    expected_page[8:10] = [7, 8]  # a write past the end lands on the last element, never outside the run
    assert got["P"].tolist() == expected_page.tolist()


# -------------------------------------------------------------------------- is_extended
PLAIN = "bindings:\n  - { name: src, kind: buffer, access: read, element: f32 }\n  - { name: dst, kind: buffer, access: read_write, element: vec4<f32> }\nparams:\n  - { name: k, type: f32 }\nworkgroup: [8, 8]\ndeterminism: float_order\n"


def test_a_schema_of_plain_buffers_and_params_is_not_extended():
    assert is_extended(parse(PLAIN)) is False


@pytest.mark.parametrize(
    "extra",
    [
        "  - { name: t, kind: columns }\n",
        '  - { name: o, access: read_write, element: f32, count: "n" }\n',
        '  - { name: o, access: read_write, element: f32, count: "n", live: true }\n',
        '  - { name: o, access: read_write, element: f32, capacity: "n", append: true }\n',
        "  - { name: r, element: f32, bits: true }\n",
        "  - { name: a, access: read_write, element: u32, atomic: true }\n",
        "  - { name: P, kind: page }\n  - { name: c, kind: column, page: P, element: f32 }\n",
        "  - { name: d, kind: domain_count }\n",
        '  - { name: w, element: f32, when: "T=f32" }\nspecialize:\n  - { name: T, options: [f32, u32] }\n',
        "specialize:\n  - { name: BODY, kind: source, default: x }\n",
    ],
    ids=["columns", "count", "live", "append", "bits", "atomic", "page-column", "domain_count", "when", "specialize"],
)
def test_any_abi_extension_makes_a_schema_extended(extra):
    head, tail = PLAIN.split("params:")
    if extra.startswith("specialize"):
        text = PLAIN + extra
    elif "specialize:" in extra:
        binding, spec = extra.split("specialize:")
        text = head + binding + "params:" + tail + "specialize:" + spec
    else:
        text = head + extra + "params:" + tail
    assert is_extended(parse(text)) is True


# ------------------------------------------------------------------------- source map
def test_the_source_map_sends_body_lines_to_the_users_file_and_generated_lines_to_bindings_yaml():
    asset = sample("reference")
    lowered = lower(asset.schema, asset.wgsl_text, {"T": "f32", "FOLD": "add"}, wgsl_path=asset.wgsl_path)
    smap = lowered.source_map
    yaml_line = user_line(asset.yaml_text, "name: src,")
    for text in (
        "@group(0) @binding(1) var<storage, read> src: array<f32>;",
        "fn src_get(zero_i: u32) -> f32 { return src[zero_i]; }",
        "    zero_len_src: u32,",
    ):
        span = smap.locate(lowered_line(lowered, text))
        assert (span.path, span.line) == (asset.yaml_path, yaml_line), text
        assert "name: src," in span.text
    span = smap.locate(lowered_line(lowered, "alias T = f32;"))
    assert (span.path, span.line) == (asset.yaml_path, user_line(asset.yaml_text, "name: T,"))
    assert smap.locate(lowered_line(lowered, "@group(0) @binding(4) var<storage, read_write> hits_count: array<atomic<u32>>;")).line == user_line(asset.yaml_text, "name: hits,")
    span = smap.locate(lowered_line(lowered, "    let v = src_get(i);"), 9)
    assert (span.path, span.line, span.col) == (asset.wgsl_path, user_line(asset.wgsl_text, "let v = src_get(i);"), 9)
    assert span.text == "    let v = src_get(i);"
    assert smap.locate(lowered_line(lowered, "fn zero_n() -> u32 { return params.n; }")) is None  # built-in: no user line
    assert smap.locate(0) is None and smap.locate(len(lowered.source.split("\n")) + 5) is None


# ------------------------------------------------------------- compiler errors, mapped back
BROKEN_YAML = """\
bindings:
  - { name: src, kind: buffer, element: T }
  - { name: dst, kind: buffer, access: read_write, element: T, count: "len(src)" }
specialize:
  - { name: T, options: [f32, vec2<f32>] }
  - { name: BODY, kind: source, default: "v" }
"""
BROKEN_BODY = """\
// a kernel with a type error on line 9 (column 9: `bad`)
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let v = src_get(i);
    let bad: u32 = BODY;  let worse: i32 = BODY;
    dst_set(i, v);
}
"""


def _compile_error_position(gpu, lowered) -> tuple[int, int]:
    with pytest.raises(wgpu.GPUValidationError) as info:
        compile_lowered(gpu.device, lowered)
    m = WGPU_POSITION.search(str(info.value))
    assert m, str(info.value)
    return int(m.group(1)), int(m.group(2))


@pytest.mark.gpu
@pytest.mark.parametrize("body", ["v", "(v * 2.0 +\n        1.0)"], ids=["one-line", "multi-line-splice"])
def test_a_compiler_error_maps_back_to_the_users_line_and_column(gpu, body):
    lowered = lower(parse(BROKEN_YAML, "broken/bindings.yaml"), BROKEN_BODY, {"T": "f32", "BODY": body}, wgsl_path="broken/kernel.wgsl")
    line, col = _compile_error_position(gpu, lowered)
    span = lowered.source_map.locate(line, col)
    assert (span.path, span.line, span.col) == ("broken/kernel.wgsl", 9, 9)
    assert span.text == "    let bad: u32 = BODY;  let worse: i32 = BODY;"


@pytest.mark.gpu
def test_a_compiler_error_after_a_splice_on_the_same_line_maps_to_the_users_column(gpu):
    body = BROKEN_BODY.replace("let bad: u32 = BODY;", "let fine = BODY;  ")  # keeps the columns
    lowered = lower(parse(BROKEN_YAML), body, {"T": "f32", "BODY": "(v * 2.0 + 1.0)"}, wgsl_path="kernel.wgsl")
    line, col = _compile_error_position(gpu, lowered)
    span = lowered.source_map.locate(line, col)
    user = body.split("\n")[8]
    assert (span.line, span.col) == (9, user.index("worse") + 1)
    assert col != span.col  # the splice really moved it in the lowered text


@pytest.mark.gpu
def test_a_compiler_error_in_a_type_variant_names_the_users_line(gpu):
    body = BROKEN_BODY.replace("let bad: u32 = BODY;  let worse: i32 = BODY;", "let ok: f32 = BODY;")
    good = lower(parse(BROKEN_YAML), body, {"T": "f32"})
    compile_lowered(gpu.device, good)  # f32 is fine
    bad = lower(parse(BROKEN_YAML), body, {"T": "vec2<f32>"}, wgsl_path="k.wgsl")
    line, col = _compile_error_position(gpu, bad)
    span = bad.source_map.locate(line, col)
    assert (span.path, span.line) == ("k.wgsl", 9)


# ----------------------------------------------------------------------- name clashes
@pytest.mark.parametrize(
    "decl,origin",
    [
        ("fn src_get(zero_i: u32) -> f32 { return 0.0; }", "bindings.yaml:2"),
        ("var<private> src: array<f32, 4>;", "bindings.yaml:2"),
        ("const T: u32 = 1u;", "bindings.yaml:4"),
        ("fn zero_n() -> u32 { return 0u; }", "the lowering"),
        ("struct ZeroParams { a: u32 }", "the lowering"),
    ],
)
def test_a_body_declaring_a_generated_name_is_refused_naming_both_lines(decl, origin):
    text = "bindings:\n  - { name: src, kind: buffer, element: T }\nspecialize:\n  - { name: T, options: [f32] }\n"
    body = "// user code\n" + decl + "\n" + MAIN
    with pytest.raises(LoweringError) as info:
        lower(parse(text, "bindings.yaml"), body, {"T": "f32"}, wgsl_path="kernel.wgsl")
    err = info.value
    name = re.search(r"(?:fn|var<private>|const|struct) (\w+)", decl).group(1)
    assert (err.path, err.line, err.col) == ("kernel.wgsl", 2, decl.index(name, decl.index(" ")) + 1)
    assert f"'{name}'" in err.message and origin in err.message


def test_a_body_may_shadow_generated_names_inside_functions(gpu):
    text = "bindings:\n  - { name: src, kind: buffer, element: f32 }\n"
    body = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let src_get = 1u;\n}\n"
    lowered = lower(parse(text), body, {})
    assert "let src_get = 1u;" in lowered.source
    gpu.device.create_shader_module(code=lowered.source)  # WGSL allows the local to shadow the fn


# SPEC §2, determinism: "exact: repeated runs on the same inputs give identical bytes; no
# unordered atomics". An exchange (the last writer wins), an f32 add (the float sum's order) and
# any atomic whose returned old value is used (a hand-made append) are refused under exact, at
# the call's line and column; integer atomics as statements of their own (a histogram) are not.
_ATOMICS_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: hu, kind: buffer, access: read_write, element: u32, count: "4", atomic: true }
  - { name: hf, kind: buffer, access: read_write, element: f32, count: "4", atomic: true }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
determinism: DET
"""


def _atomics_body(line: str) -> str:
    return (
        "var<workgroup> wgc: atomic<u32>;\n@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
        f"{line}\n}}\n"
    )


@pytest.mark.parametrize(
    "line, col",
    [
        ("    _ = hu_atomic_exchange(0u, i);", 9),
        ("    hf_atomic_add(0u, src_get(i));", 5),
        ("    _ = hf_atomic_exchange(1u, 2.0);", 9),
        ("    let slot = hu_atomic_add(0u, 1u); out_set(slot, i);", 16),
        ("    out_set(i, hu_atomic_max(1u, i));", 16),
        ("    if (hu_atomic_min(2u, i) > 3u) { out_set(i, 1u); }", 9),
        ("    out_set(i, atomicAdd(&hu[0], 1u));", 16),  # WGSL's own atomics on the binding
        ("    _ = atomicExchange(&hu[0], i);", 9),
        ("    _ = atomicExchange\u200e(&hu[0], i);", 9),  # a left-to-right mark: WGSL blankspace (helper 112)
        ("    let s = atomicAdd(&wgc, 1u); out_set(i, s);", 13),  # a slot from a workgroup atomic
    ],
)
def test_determinism_exact_refuses_atomics_whose_bytes_depend_on_order(line, col):
    yaml = _ATOMICS_YAML.replace("DET", "exact")
    with pytest.raises(LoweringError) as info:
        lower(parse(yaml, "k/bindings.yaml"), _atomics_body(line), {}, wgsl_path="k/kernel.wgsl")
    err = info.value
    assert err.span.path == "k/kernel.wgsl" and err.span.line == 6 and err.span.col == col, str(err)
    assert "determinism: exact" in str(err) and "float_order" in str(err)
    lower(parse(_ATOMICS_YAML.replace("DET", "float_order"), "k/bindings.yaml"), _atomics_body(line), {}, wgsl_path="k/kernel.wgsl")


@pytest.mark.parametrize(
    "line",
    [
        "    hu_atomic_add(u32(src_get(i)) % 4u, 1u);",
        "    _ = hu_atomic_max(1u, i);",
        "    if (i > 2u) { hu_atomic_or(2u, i); _ = hf_atomic_min(0u, src_get(i)); }",
        "    for (var k = 0u; k < 2u; hu_atomic_add(0u, 1u)) { k++; }",  # a for header's update
        "    for (hu_atomic_add(0u, 1u); i < 0u; ) { }",  # and its init
        "    atomicAdd(&wgc, 1u);",
    ],
)
def test_determinism_exact_keeps_order_free_atomics(line):
    lower(parse(_ATOMICS_YAML.replace("DET", "exact"), "k/bindings.yaml"), _atomics_body(line), {}, wgsl_path="k/kernel.wgsl")


def test_determinism_exact_checks_the_atomics_of_imported_modules_at_their_own_line():
    yaml = """\
bindings:
  - { name: hu, kind: buffer, access: read_write, element: u32, count: "4", atomic: true }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
determinism: exact
"""
    module = "// slots\nfn take_slot() -> u32 { return hu_atomic_add(0u, 1u); }\n"
    body = (
        "#import slots\n@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    out_set(take_slot(), i);\n}\n"
    )
    with pytest.raises(LoweringError) as info:
        lower(parse(yaml, "k/bindings.yaml"), body, {}, wgsl_path="k/kernel.wgsl", modules={"slots": ("modules/slots.wgsl", module)})
    assert info.value.span.path == "modules/slots.wgsl" and info.value.span.line == 2, str(info.value)
    lower(parse(yaml.replace("exact", "float_order"), "k/bindings.yaml"), body, {}, wgsl_path="k/kernel.wgsl", modules={"slots": ("modules/slots.wgsl", module)})


def test_determinism_exact_judges_only_the_module_functions_the_body_reaches_and_not_compare_exchange():
    # Review helper 29: an unused float_order helper in a shared module refused every exact
    # asset importing it; an order-free compare-exchange max (workgroup memory) was refused.
    yaml = 'bindings:\n  - { name: src, kind: buffer, access: read, element: f32 }\n  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }\ndeterminism: exact\n'
    module = (
        "fn wg_take(p: ptr<workgroup, atomic<u32>>) -> u32 { return atomicAdd(p, 1u); }\n"
        "fn hash(x: u32) -> u32 { return x * 747796405u + 2891336453u; }\n"
        "fn via(x: u32) -> u32 { return hash(x); }\n"
    )
    body = (
        "#import util\nvar<workgroup> wmax: atomic<u32>;\n@compute @workgroup_size(64)\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
        "    let v = bitcast<u32>(abs(src_get(i)));\n    var old = atomicLoad(&wmax);\n"
        "    loop {\n        let r = atomicCompareExchangeWeak(&wmax, old, max(old, v));\n"
        "        if (r.exchanged || r.old_value >= v) { break; }\n        old = r.old_value;\n    }\n"
        "    out_set(i, via(i));\n}\n"
    )
    modules = {"util": ("modules/util.wgsl", module)}
    lower(parse(yaml, "k/bindings.yaml"), body, {}, wgsl_path="k/kernel.wgsl", modules=modules)
    with pytest.raises(LoweringError) as info:  # once the body reaches wg_take, it is judged
        lower(parse(yaml, "k/bindings.yaml"), body.replace("via(i)", "via(i) + wg_take(&wmax)"), {}, wgsl_path="k/kernel.wgsl", modules=modules)
    assert info.value.span.path == "modules/util.wgsl" and info.value.span.line == 1


def test_a_schemas_workgroup_equals_the_forms_spec_writes_it_in():
    # SPEC: "workgroup (default 64; an int or a list of up to three)"; it answered (64, 1, 1)
    # only, so schema.workgroup == 64 was False (review helper 175).
    assert parse("bindings: []\n").workgroup == 64
    assert parse("bindings: []\n").workgroup == (64, 1, 1) and parse("bindings: []\n").workgroup != 32
    square = parse("bindings: []\nworkgroup: [8, 8]\n").workgroup
    assert square == [8, 8] and square == (8, 8, 1) and square != 8 and tuple(square) == (8, 8, 1)
    assert parse("bindings: []\nworkgroup: 256\n").workgroup == 256 and hash(square) == hash((8, 8, 1))
    assert (parse("bindings: []\n").workgroup == np.int64(64)) is True  # a bool, not an array (helper 178)


def test_an_unknown_specialisation_in_a_cr_only_schema_has_its_column():
    # The schema's lines were split at \n only: a CR-only file lost the column (helper 178).
    from engine_plugin.errors import SpecializationError

    text = "bindings:\r  - { name: d, kind: buffer, access: read_write, element: T, count: n }\rspecialize:\r  - { name: T, options: [f32, u32] }\r"
    with pytest.raises(SpecializationError) as err:
        resolve_spec(parse(text, "cr/bindings.yaml"), {"T": "f32", "Q": "x"})
    assert (err.value.span.line, err.value.span.col) == (4, 13)


def test_a_binding_named_underscore_is_refused_at_the_schema():
    # It passed the schema and failed at compile, "invalid identifier: note: Use phony
    # assignment instead" (review helper 184).
    with pytest.raises(SchemaError, match="'_' is not a WGSL identifier") as err:
        parse("bindings:\n  - { name: _, kind: buffer, access: read_write, element: f32, count: n }\n", "u/bindings.yaml")
    assert (err.value.span.line, err.value.span.col) == (2, 13)
