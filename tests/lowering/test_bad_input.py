"""Malformed schemas and bodies: each is refused with the right class, file, line and column.

A case names where the error must point by a *marker*: the text the reported column starts
at, found on its first occurrence in the file the error names. So each case reads as "this
input, refused at this token, saying this".
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field

import pytest

from engine_plugin.errors import ExpressionError, LoweringError, PluginError, SchemaError, SpecializationError
from engine_plugin.lowering import lower, parse

YAML = "bad.computeShader/bindings.yaml"
WGSL = "bad.computeShader/kernel.wgsl"
HEAD = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
MAIN = HEAD + "}\n"
# A well-formed schema the body cases lower against.
GOOD = """\
bindings:
  - { name: src,  kind: buffer, element: T }
  - { name: hits, kind: buffer, access: read_write, element: u32, capacity: "n", append: true }
specialize:
  - { name: T,    options: [f32, u32] }
  - { name: M,    options: [a, b] }
  - { name: BODY, kind: source, default: "v" }
"""
SPEC = {"T": "f32", "M": "a"}
_CALLS_MAIN = "a call of 'main', the entry point: only the host calls it (WGSL has no recursion, and no call of an entry point)"


@dataclass(frozen=True)
class Bad:
    id: str
    yaml: str
    error: type
    at: str | None  # the marker the column starts at (None: line 1 / no column check)
    says: str
    body: str | None = None  # None: the schema alone is refused
    spec: dict = field(default_factory=lambda: dict(SPEC))
    col: bool = True  # whether the column is meaningful for this error
    nth: int = 0  # which occurrence of the marker
    path: str | None = None  # the file named; default: the WGSL for body cases, else the YAML


def _pages(n: int) -> str:
    return "bindings:\n" + "".join(f"  - {{ name: P{i}, kind: page, access: read_write }}\n" for i in range(n))


CASES = [
    # ---------------------------------------------------------------- YAML and top level
    Bad("yaml-syntax", "bindings:\n  - { name: a, element: f32\n  - { name: b }\n", SchemaError, "{ name: b }", "invalid YAML"),
    Bad("yaml-tab-indent", "bindings:\n\t- { name: a }\n", SchemaError, "\t", "invalid YAML"),
    Bad("empty-file", "", SchemaError, None, "empty bindings.yaml", col=False),
    Bad("no-bindings", "params: []\n", SchemaError, None, "no 'bindings:'", col=False),
    Bad("bindings-not-a-list", "bindings: {a: 1}\n", SchemaError, "{a: 1}", "bindings must be a list"),
    Bad("unknown-top-level-key", "bindings: []\nworkgroups: 64\n", SchemaError, "workgroups", "did you mean 'workgroup'?"),
    Bad("duplicate-key", "bindings:\n  - { name: a, element: f32, element: u32 }\n", SchemaError, "element", "given twice", nth=1),
    # ---------------------------------------------------------------------- bindings
    Bad("unknown-binding-key", "bindings:\n  - { name: a, elemnt: f32 }\n", SchemaError, "elemnt", "did you mean 'element'?"),
    Bad("bad-kind", "bindings:\n  - { name: a, kind: bufer, element: f32 }\n", SchemaError, "bufer", "did you mean 'buffer'?"),
    Bad("key-not-for-kind", "bindings:\n  - { name: t, kind: columns, element: f32 }\n", SchemaError, "element", "does not apply to kind columns"),
    Bad("missing-name", "bindings:\n  - { kind: buffer, element: f32 }\n", SchemaError, "{ kind", "needs 'name'"),
    Bad("reserved-name", "bindings:\n  - { name: zero_x, element: f32 }\n", SchemaError, "zero_x", "reserved"),
    # count expressions read nx/ny/nz as the grid's axes: a param of that name sized outputs by the grid (helper 72)
    Bad("param-named-nx", "bindings: []\nparams:\n  - { name: nx, type: u32 }\n", SchemaError, "nx", "param 'nx' is built in"),
    Bad(
        "param-named-nz",
        "bindings: []\nparams:\n  - { name: a, type: u32 }\n  - { name: nz, type: f32 }\n",
        SchemaError,
        "nz, type: f32",
        "param 'nz' is built in",
    ),
    # past 2**64 it reached the cache's encoder as a raw TypeError (helper 80)
    Bad(
        "param-array-past-the-uniform",
        "bindings: []\nparams:\n  - { name: g, type: 'array<vec4<f32>, 99999999999999999999>' }\n",
        SchemaError,
        "'array<",
        "binds at most 65536",
    ),
    Bad(
        "param-array-just-past-the-uniform",
        "bindings: []\nparams:\n  - { name: g, type: array<vec4<f32>, 4097> }\n",
        SchemaError,
        "array<",
        "takes 65552 bytes",
    ),
    # one 64 KiB array passed its own check, but the lowering's fields took the struct past it: a raw wgpu error (helper 82)
    Bad(
        "params-past-the-uniform-in-total",
        "bindings: []\nparams:\n  - { name: a, type: array<vec4<f32>, 2560> }\n  - { name: b, type: array<vec4<f32>, 2560> }\n",
        LoweringError,
        "{ name: a",
        "the params take 81968 bytes",
        body=MAIN,
        spec={},
        path=YAML,
        col=False,
    ),
    # accepted, then refused at pipeline creation naming no line (helper 83)
    Bad(
        "storage-texture-read-write-format",
        "bindings:\n  - { name: img, kind: storage_texture, dim: 2d, format: rgba8unorm, access: read_write }\n",
        SchemaError,
        "rgba8unorm",
        "access read_write takes r32float, r32uint, r32sint",
    ),
    Bad(
        "storage-texture-read-bgra8unorm",
        "bindings:\n  - { name: img, kind: storage_texture, dim: 2d, format: bgra8unorm, access: read }\n",
        SchemaError,
        "bgra8unorm",
        "write-only storage format",
    ),
    Bad("keyword-name", "bindings:\n  - { name: var, element: f32 }\n", SchemaError, "var", "reserved"),
    # WGSL's reserved words: naga refused them, its error placed on another field (review helper 118)
    Bad(
        "reserved-word-binding",
        'bindings:\n  - { name: meta, kind: buffer, access: read_write, element: u32, count: "8" }\n',
        SchemaError,
        "meta",
        "reserved word in WGSL",
    ),
    Bad("access-mode-binding", "bindings:\n  - { name: read, kind: buffer, access: read, element: f32 }\n", SchemaError, "read,", "reserved word in WGSL"),
    Bad(
        "address-space-binding", "bindings:\n  - { name: uniform, kind: buffer, access: read, element: f32 }\n", SchemaError, "uniform", "reserved word in WGSL"
    ),
    Bad("reserved-word-param", "bindings:\n  - { name: a, element: f32 }\nparams:\n  - { name: of, type: u32 }\n", SchemaError, "of,", "reserved word in WGSL"),
    Bad("missing-element", "bindings:\n  - { name: a, kind: buffer }\n", SchemaError, "{ name: a", "needs 'element'"),
    Bad("bad-element", "bindings:\n  - { name: a, element: f64 }\n", SchemaError, "f64", "not 'f64'"),
    Bad("bad-access", "bindings:\n  - { name: a, element: f32, access: write }\n", SchemaError, "write", "access must be 'read' or 'read_write'"),
    Bad("flag-not-a-bool", "bindings:\n  - { name: a, element: f32, bits: yes please }\n", SchemaError, "yes please", "bits must be true or false"),
    Bad("count-on-a-read-binding", 'bindings:\n  - { name: a, element: f32, count: "n" }\n', SchemaError, '"n"', "use access: read_write"),
    Bad(
        "capacity-without-append",
        'bindings:\n  - { name: a, access: read_write, element: f32, capacity: "n" }\n',
        SchemaError,
        '"n"',
        "'capacity' goes with append: true",
    ),
    Bad("append-without-capacity", "bindings:\n  - { name: a, access: read_write, element: f32, append: true }\n", SchemaError, "true", "needs 'capacity'"),
    Bad(
        "append-with-count",
        'bindings:\n  - { name: a, access: read_write, element: f32, count: "n", capacity: "n", append: true }\n',
        SchemaError,
        '"n", capacity',
        "not 'count'",
    ),
    Bad(
        "live-without-count-n",
        'bindings:\n  - { name: a, access: read_write, element: f32, count: "n * 2", live: true }\n',
        SchemaError,
        "true",
        'live: true needs count: "n"',
    ),
    Bad("atomic-vector", "bindings:\n  - { name: a, access: read_write, element: vec2<u32>, atomic: true }\n", SchemaError, "vec2<u32>", "one-lane"),
    Bad("atomic-read-only", "bindings:\n  - { name: a, element: u32, atomic: true }\n", SchemaError, "true", "need access: read_write"),
    Bad(
        "append-counter-name-taken",
        'bindings:\n  - { name: h, access: read_write, element: f32, capacity: "n", append: true }\n  - { name: h_count, element: u32 }\n',
        SchemaError,
        "{ name: h,",
        "'h_count'",
    ),
    Bad(
        "binding-named-like-a-param",
        "bindings:\n  - { name: r, element: f32 }\nparams:\n  - { name: r, type: f32 }\n",
        SchemaError,
        "{ name: r, element",
        "name of a param",
    ),
    Bad(
        "second-domain-count",
        "bindings:\n  - { name: d, kind: domain_count }\n  - { name: e, kind: domain_count }\n",
        SchemaError,
        "{ name: e",
        "second domain_count",
    ),
    # ------------------------------------------------------------------------- when
    Bad(
        "when-syntax",
        'bindings:\n  - { name: a, element: f32, when: "T=f32 oops" }\nspecialize:\n  - { name: T, options: [f32, u32] }\n',
        SchemaError,
        "oops",
        "expected NAME=option",
    ),
    Bad(
        "when-empty-alternative",
        'bindings:\n  - { name: a, element: f32, when: "T=f32;;T=u32" }\nspecialize:\n  - { name: T, options: [f32, u32] }\n',
        SchemaError,
        ";T=u32",
        "empty alternative",
    ),
    Bad(
        "when-unknown-specialisation",
        'bindings:\n  - { name: a, element: f32, when: "T=f32 Q=x" }\nspecialize:\n  - { name: T, options: [f32, u32] }\n',
        SchemaError,
        "Q=x",
        "'Q', which is not a specialisation",
    ),
    Bad(
        "when-unknown-option",
        'bindings:\n  - { name: a, element: f32, when: "T=f64" }\nspecialize:\n  - { name: T, options: [f32, u32] }\n',
        SchemaError,
        "T=f64",
        "T='f64' is not an option of T",
    ),
    Bad(
        "shared-name-overlapping",
        'bindings:\n  - { name: a, element: f32, when: "T=f32" }\n  - { name: a, element: u32, when: "T=f32|u32" }\nspecialize:\n  - { name: T, options: [f32, u32] }\n',
        SchemaError,
        "{ name: a, element: u32",
        "first on line 2",
    ),
    Bad(
        "shared-name-unconditional",
        "bindings:\n  - { name: a, element: f32 }\n  - { name: a, element: u32 }\n",
        SchemaError,
        "{ name: a, element: u32",
        "declared again",
    ),
    # ----------------------------------------------------------------- pages / columns
    Bad("ninth-page", _pages(9), SchemaError, "{ name: P8", "ninth page"),
    Bad(
        "column-without-page", "bindings:\n  - { name: P, kind: page }\n  - { name: c, kind: column, element: f32 }\n", SchemaError, "{ name: c", "needs 'page'"
    ),
    Bad(
        "column-unknown-page",
        "bindings:\n  - { name: P, kind: page }\n  - { name: c, kind: column, page: Q, element: f32 }\n",
        SchemaError,
        "Q, element",
        "'Q', which is not a kind: page",
    ),
    Bad(
        "column-whose-page-the-variant-leaves-out",
        'bindings:\n  - { name: P, kind: page, when: "M=a" }\n  - { name: c, kind: column, page: P, element: f32 }\nspecialize:\n  - { name: M, options: [a, b] }\n',
        LoweringError,
        "{ name: c",
        "which this variant leaves out",
        body=MAIN,
        spec={"M": "b"},
        path=YAML,
    ),
    Bad(
        "read-write-column-on-read-page",
        "bindings:\n  - { name: P, kind: page }\n  - { name: c, kind: column, page: P, element: f32, access: read_write }\n",
        SchemaError,
        "read_write",
        "read-only",
    ),
    # --------------------------------------------------------- workgroup, determinism
    Bad(
        "workgroup-not-a-number",
        "bindings: []\nworkgroup: big\n",
        SchemaError,
        "big",
        "workgroup must be 1 to 3 positive ints (or kind: workgroup specialisations), not 'big'; e.g. workgroup: 64 or workgroup: [8, 8]",
    ),
    Bad("workgroup-zero", "bindings: []\nworkgroup: [8, 0]\n", SchemaError, "[8, 0]", "positive ints"),
    Bad("workgroup-too-large", "bindings: []\nworkgroup: [64, 64]\n", SchemaError, "[64, 64]", "4096 invocations"),
    Bad("workgroup-four-dims", "bindings: []\nworkgroup: [1, 1, 1, 1]\n", SchemaError, "[1, 1, 1, 1]", "1 to 3"),
    Bad("bad-determinism", "bindings: []\ndeterminism: fast\n", SchemaError, "fast", "'exact' or 'float_order', not 'fast'"),
    # -------------------------------------------------------------------------- params
    Bad("param-type", "bindings: []\nparams:\n  - { name: r, type: f64 }\n", SchemaError, "f64", "param type must be"),
    Bad(
        "param-twice",
        "bindings: []\nparams:\n  - { name: r, type: f32 }\n  - { name: r, type: u32 }\n",
        SchemaError,
        "r, type: u32",
        "declared twice (first on line 3)",
    ),
    Bad("param-named-n", "bindings: []\nparams:\n  - { name: n, type: u32 }\n", SchemaError, "n, type", "built in"),
    Bad("param-missing-type", "bindings: []\nparams:\n  - { name: r }\n", SchemaError, "{ name: r }", "needs 'name' and 'type'"),
    # ---------------------------------------------------------------------- specialize
    Bad("type-option-bad", "bindings: []\nspecialize:\n  - { name: T, kind: type, options: [f32, f64] }\n", SchemaError, "f64", "type option 'f64'"),
    Bad(
        "named-option-not-an-identifier",
        'bindings: []\nspecialize:\n  - { name: M, kind: named, options: [add, "a b"] }\n',
        SchemaError,
        '"a b"',
        "must be an identifier",
    ),
    Bad(
        "specialize-kind-bad",
        "bindings: []\nspecialize:\n  - { name: M, kind: enum, options: [a] }\n",
        SchemaError,
        "enum",
        "'type', 'named', 'source' or 'workgroup'",
    ),
    Bad(
        "specialize-default-not-an-option",
        "bindings: []\nspecialize:\n  - { name: M, options: [a, b], default: c }\n",
        SchemaError,
        "c }",
        "not one of its options: a, b",
    ),
    Bad("specialize-without-options", "bindings: []\nspecialize:\n  - { name: M }\n", SchemaError, "{ name: M }", "needs 'options'"),
    Bad("option-listed-twice", "bindings: []\nspecialize:\n  - { name: M, options: [a, a] }\n", SchemaError, "a]", "listed twice"),
    Bad(
        "bake-unknown-option",
        "bindings: []\nspecialize:\n  - { name: T, options: [f32, u32] }\nbake:\n  - { T: f64 }\n",
        SchemaError,
        "f64",
        "not one of its options: f32, u32",
    ),
    Bad(
        "bake-unknown-name",
        "bindings: []\nspecialize:\n  - { name: T, options: [f32, u32] }\nbake:\n  - { Q: f32 }\n",
        SchemaError,
        "Q: f32",
        "unknown key 'Q'",
    ),
    # --------------------------------------------------------------- count expressions
    Bad("count-syntax", 'bindings:\n  - { name: a, access: read_write, element: f32, count: "n + * 2" }\n', ExpressionError, '* 2"', "binding 'a': count"),
    Bad("count-syntax-unquoted", "bindings:\n  - { name: a, access: read_write, element: f32, count: n + ) }\n", ExpressionError, ") }", "found ')'"),
    Bad(
        "count-syntax-block-style",
        "bindings:\n  - name: a\n    access: read_write\n    element: f32\n    count: n + * 2\n",
        ExpressionError,
        "* 2",
        "binding 'a': count",
    ),
    Bad(
        "count-unknown-name",
        'bindings:\n  - { name: a, access: read_write, element: f32, count: "n * radius" }\n',
        ExpressionError,
        "radius",
        "unknown name 'radius'",
    ),
    Bad(
        "capacity-unknown-binding-length",
        'bindings:\n  - { name: a, access: read_write, element: f32, capacity: "len(srcs)", append: true }\n',
        ExpressionError,
        "srcs",
        "len(srcs) names no binding",
    ),
    Bad(
        "count-own-length",
        'bindings:\n  - { name: a, access: read_write, element: f32, count: "len(a)" }\n',
        ExpressionError,
        '"len(a)"',
        "its own length",
        col=False,
    ),
    # ------------------------------------------------------------------- WGSL bodies
    Bad("at-when-block-never-closed", GOOD, LoweringError, "// @when M a", "never closed", body=HEAD + "    // @when M a\n    let x = 1u;\n}\n", col=False),
    Bad(
        "at-when-nested-never-closed",
        GOOD,
        LoweringError,
        "// @when M a",
        "never closed",
        body=HEAD + "    // @when M a\n    // @when T f32\n    // @end\n}\n",
        col=False,
    ),
    Bad("at-end-without-at-when", GOOD, LoweringError, "// @end", "without an open", body=HEAD + "    let x = 1u;\n    // @end\n}\n"),
    Bad("at-when-unknown-name", GOOD, LoweringError, "Q a", "'Q' is not a specialisation", body=HEAD + "    // @when Q a\n    // @end\n}\n"),
    Bad("at-when-unknown-option", GOOD, LoweringError, "c\n", "'c' is not an option of M (a, b)", body=HEAD + "    // @when M c\n    // @end\n}\n"),
    Bad("at-when-without-options", GOOD, LoweringError, "// @when M", "lists no options", body=HEAD + "    // @when M\n    // @end\n}\n"),
    Bad(
        "append-in-an-exact-shader",
        GOOD,
        LoweringError,
        "hits_append(i)",
        "determinism: exact",
        body=HEAD + "    let i = gid.x;\n    let s = hits_append(i);\n}\n",
    ),
    Bad(
        "generated-fn-declared-by-body",
        GOOD,
        LoweringError,
        "src_get",
        f"generated for binding 'src' ({YAML}:2)",
        body="fn src_get(i: u32) -> f32 { return 0.0; }\n" + MAIN,
    ),
    Bad("counter-name-declared-by-body", GOOD, LoweringError, "hits_count", f"({YAML}:3)", body="var<private> hits_count: u32;\n" + MAIN),
    Bad("option-const-declared-by-body", GOOD, LoweringError, "M_a", f"specialisation 'M' ({YAML}:6)", body="const M_a: u32 = 0u;\n" + MAIN),
    # it swallowed the generated entry point: pipeline creation failed naming no line (helper 80)
    Bad("block-comment-never-closed", GOOD, LoweringError, "/* never", "'/*' is never closed", body=MAIN + "/* never closed\n"),
    Bad("nested-block-comment-never-closed", GOOD, LoweringError, "/* outer", "'/*' is never closed", body=MAIN + "/* outer /* inner */\n"),
    # a ported kernel's own entry name was refused at line 1, column 1 (helper 79)
    Bad(
        "entry-point-not-named-main",
        GOOD,
        LoweringError,
        "cs_main",
        "the entry point is named 'cs_main'",
        body="\n// ported\n@compute @workgroup_size(64)\nfn cs_main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    # the generated zero_index called the body's own `any`: padding invocations wrote the next row (helper 82)
    Bad(
        "body-fn-hides-a-builtin-the-accessors-call",
        GOOD,
        LoweringError,
        "any(v",
        "'any' hides the WGSL builtin any()",
        body="fn any(v: vec3<bool>) -> bool { return false; }\n" + MAIN,
    ),
    Bad("no-entry-point", GOOD, LoweringError, "fn helper", "declares no entry point", body="fn helper() {}\n"),
    Bad(
        "entry-point-only-in-a-comment",
        GOOD,
        LoweringError,
        "mian",
        "the entry point is named 'mian'",
        body="// fn main() {}\n@compute @workgroup_size(64)\nfn mian() {}\n",
    ),
    # a call of main reached the generated entry point: naga named zero_user_main, with no
    # line ("declaration of `zero_user_main` is cyclic", review helper 237)
    Bad("main-calls-itself", GOOD, LoweringError, "main(gid)", _CALLS_MAIN, body=HEAD + "    main(gid);\n}\n"),
    Bad("a-helper-calls-main", GOOD, LoweringError, "main(g)", _CALLS_MAIN, body="fn f(g: vec3<u32>) { main(g); }\n" + HEAD + "    f(gid);\n}\n"),
    Bad("a-source-value-calls-main", GOOD, LoweringError, "BODY", _CALLS_MAIN, body=HEAD + "    BODY;\n}\n", spec={**SPEC, "BODY": "main(gid)"}),
    Bad(
        "body-declares-a-binding", GOOD, LoweringError, "@binding(7)", "its own @binding", body="@group(0) @binding(7) var<storage> extra: array<u32>;\n" + MAIN
    ),
    Bad(
        "workgroup-size-mismatch",
        GOOD,
        LoweringError,
        "workgroup_size(32)",
        "does not match bindings.yaml's workgroup (64)",
        body="@compute @workgroup_size(32)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    # a kernel written for 32 invocations ran with 64 when its size was not literals (helper 72)
    Bad(
        "workgroup-size-const-mismatch",
        GOOD,
        LoweringError,
        "workgroup_size(WG)",
        "@workgroup_size(32) does not match",
        body="const WG: u32 = 32u;\n@compute @workgroup_size(WG)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    Bad(
        "workgroup-size-override-mismatch",
        GOOD,
        LoweringError,
        "workgroup_size(WG)",
        "@workgroup_size(32) does not match",
        body="override WG: u32 = 32u;\n@compute @workgroup_size(WG)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    Bad(
        "workgroup-size-expression-mismatch",
        GOOD,
        LoweringError,
        "workgroup_size(8 * 4)",
        "@workgroup_size(32) does not match",
        body="@compute @workgroup_size(8 * 4)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    Bad(
        "workgroup-size-max-mismatch",
        GOOD,
        LoweringError,
        "workgroup_size(max",
        "@workgroup_size(32) does not match",
        body="@compute @workgroup_size(max(8u, 32u))\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    # an attribute the check cannot evaluate was only logged, and the host dispatched by the
    # schema's size: a body written for 32 ran at 64 (review helper 218)
    Bad(
        "workgroup-size-unevaluable",
        GOOD,
        LoweringError,
        "workgroup_size(select",
        "cannot be checked against bindings.yaml's workgroup",
        body="const WGS: u32 = 32u;\n@compute @workgroup_size(select(64u, WGS, true))\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    # main's own attribute, not the first in the body (helper 76)
    Bad(
        "workgroup-size-vector-lane-mismatch",
        GOOD,
        LoweringError,
        "workgroup_size(V",
        "@workgroup_size(32) does not match",
        body="const V = vec3<u32>(32u, 1u, 1u);\n@compute @workgroup_size(V.x)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    Bad(
        "workgroup-size-of-main-not-the-first",
        GOOD,
        LoweringError,
        "workgroup_size(32)",
        "@workgroup_size(32) does not match",
        body="@compute @workgroup_size(64)\nfn other() {\n}\n@compute @workgroup_size(32)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    Bad(
        "workgroup-size-mismatch-2d",
        GOOD,
        LoweringError,
        "workgroup_size(64, 2)",
        "@workgroup_size(64, 2)",
        body="@compute @workgroup_size(64, 2)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n",
    ),
    Bad(
        "binding-named-bitcast",
        'bindings:\n  - { name: bitcast, access: read_write, element: f32, count: "n", bits: true }\n',
        LoweringError,
        "bitcast, access",
        "WGSL builtin bitcast()",
        body=MAIN,
        spec={},
        path=YAML,
    ),
    # a schema name hiding a WGSL builtin the generated code calls failed inside generated code (helper 77)
    Bad(
        "binding-named-min",
        'bindings:\n  - { name: t, kind: columns, access: read }\n  - { name: min, access: read_write, element: u32, count: "n", atomic: true }\n',
        LoweringError,
        "min, access",
        "binding 'min' is named like the WGSL builtin min()",
        body=MAIN,
        spec={},
        path=YAML,
    ),
    Bad(
        "binding-named-select",
        "bindings:\n  - { name: t, kind: columns, access: read }\n  - { name: select, element: u32 }\n",
        LoweringError,
        "select, element",
        "WGSL builtin select()",
        body=MAIN,
        spec={},
        path=YAML,
    ),
    Bad(
        "struct-named-select",
        "structs:\n  select: { a: f32 }\nbindings:\n  - { name: t, kind: columns, access: read }\n",
        LoweringError,
        "select:",
        "struct 'select' is named like",
        body=MAIN,
        spec={},
        path=YAML,
    ),
    Bad(
        "specialisation-named-max",
        "bindings:\n  - { name: t, kind: columns, access: read }\nspecialize:\n  - { name: max, options: [a, b] }\n",
        LoweringError,
        "max, options",
        "specialisation 'max'",
        body=MAIN,
        spec={"max": "a"},
        path=YAML,
    ),
    # -------------------------------------------------------------- specialisation values
    Bad(
        "unknown-option-value",
        GOOD,
        SpecializationError,
        "T,    options",  # at the specialisation's name (review helper 107: no column)
        "T='f64' is not an option; T takes one of: f32, u32",
        body=MAIN,
        spec={"T": "f64", "M": "a"},
        path=YAML,
    ),
    Bad(
        "unknown-specialisation-name",
        GOOD,
        SpecializationError,
        "T,    options",  # at the first declared one, where the names it may be are listed
        "unknown specialisation 'Q'; this schema has: T, M, BODY",
        body=MAIN,
        spec={"T": "f32", "M": "a", "Q": "x"},
        path=YAML,
    ),
    Bad("specialisation-not-text", GOOD, SpecializationError, "{ name: T", "must be text", body=MAIN, spec={"T": 3, "M": "a"}, col=False, path=YAML),
]


def _where(text: str, marker: str, nth: int) -> tuple[int, int]:
    """(line, col), 1-based, of the ``nth`` occurrence of ``marker`` in ``text``."""
    at = -1
    for _ in range(nth + 1):
        at = text.find(marker, at + 1)
        assert at >= 0, f"marker {marker!r} not in the case's text"
    line = text.count("\n", 0, at) + 1
    col = at - (text.rfind("\n", 0, at) + 1) + 1
    return line, col


def test_there_are_at_least_25_distinct_cases():
    assert len({c.id for c in CASES}) == len(CASES) >= 25
    assert len({(c.yaml, c.body, tuple(sorted(c.spec.items()))) for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_input_is_refused_at_its_place(case: Bad):
    with pytest.raises(PluginError) as info:
        schema = parse(case.yaml, YAML)
        assert case.body is not None, "the schema parsed"
        lower(schema, case.body, case.spec, wgsl_path=WGSL)
    err = info.value
    assert type(err) is case.error, f"{type(err).__name__}: {err}"
    assert case.says in err.message, err.message
    path = case.path or (WGSL if case.body is not None and case.error is LoweringError else YAML)
    assert err.path == path
    text = case.body if path == WGSL else case.yaml
    if case.at is None:
        assert err.line in (None, 1)
        return
    line, col = _where(text, case.at, case.nth)
    assert err.line == line, f"line {err.line}, expected {line}: {err}"
    if case.col:
        assert err.col == col, f"column {err.col}, expected {col}: {err}"
    # A located error renders like a compiler: path:line:col, the line, a caret.
    rendered = str(err)
    assert rendered.startswith(f"{path}:{line}:")
    if err.span.text is not None:
        assert err.span.text == text.split("\n")[line - 1]
        assert any(row.strip() == "^" for row in rendered.split("\n"))


def test_an_expression_error_is_a_schema_error_and_a_value_error():
    with pytest.raises(ValueError) as info:
        parse('bindings:\n  - { name: a, access: read_write, element: f32, count: "n +" }\n')
    assert isinstance(info.value, ExpressionError) and isinstance(info.value, SchemaError)


def test_append_is_refused_in_an_exact_shader_even_when_other_calls_are_fine():
    body = HEAD + "    hits_store(0u, 1u);\n    // hits_append(1u) in a comment is fine\n    _ = hits_count_value();\n}\n"
    lowered = lower(parse(GOOD, YAML), body, SPEC, wgsl_path=WGSL)
    assert "hits_append" not in lowered.source.split("// ---- kernel body ----")[0]


def test_append_inside_a_blanked_when_block_is_not_refused():
    body = HEAD + "    // @when M b\n    let s = hits_append(1u);\n    // @end\n}\n"
    lower(parse(GOOD, YAML), body, SPEC, wgsl_path=WGSL)
    with pytest.raises(LoweringError) as info:
        lower(parse(GOOD, YAML), body, {"T": "f32", "M": "b"}, wgsl_path=WGSL)
    assert info.value.line == 4


def test_a_name_clash_names_both_the_body_line_and_the_bindings_yaml_line():
    body = "// helper\n\nfn src_len() -> u32 { return 0u; }\n" + MAIN
    with pytest.raises(LoweringError) as info:
        lower(parse(GOOD, YAML), body, SPEC, wgsl_path=WGSL)
    err = info.value
    assert (err.path, err.line, err.col) == (WGSL, 3, 4)
    assert f"{YAML}:2" in err.message and any(f"{YAML}:2" in n for n in err.notes)
    assert "fn src_len() -> u32 { return 0u; }" in str(err)


def test_columns_naming_an_unknown_table_is_refused():
    with pytest.raises(SpecializationError) as info:
        lower(parse(GOOD, YAML), MAIN, SPEC, columns={"nope": ["a"]})
    assert "'nope'" in info.value.message and "not a kind: columns binding" in info.value.message


# Schema names that collide with a name the lowering generates for another declaration. Each
# must be refused naming the YAML (a SchemaError at parse or a LoweringError at lowering),
# never handed to wgpu as WGSL that redefines a name.
GENERATED_CLASHES = [
    ("binding-named-like-the-params-struct", "bindings:\n  - { name: ZeroParams, element: f32 }\n", {}, None, "ZeroParams", {2}),
    (
        "binding-named-like-another-bindings-accessor",
        "bindings:\n  - { name: src, element: f32 }\n  - { name: src_get, element: f32 }\n",
        {},
        None,
        "src_get",
        {2, 3},
    ),
    (
        "binding-named-like-an-option-const",
        "bindings:\n  - { name: FOLD_add, element: f32 }\nspecialize:\n  - { name: FOLD, options: [add, min] }\n",
        {"FOLD": "add"},
        None,
        "FOLD_add",
        {2, 4},
    ),
    (
        "specialisation-named-like-an-option-const",
        "bindings: []\nspecialize:\n  - { name: FOLD, options: [add, min] }\n  - { name: FOLD_add, options: [x, y] }\n",
        {"FOLD": "add", "FOLD_add": "x"},
        None,
        "FOLD_add",
        {3, 4},
    ),
    (
        "binding-named-like-a-table-column-const",
        "bindings:\n  - { name: t, kind: columns }\n  - { name: t_col_a, element: f32 }\n",
        {},
        {"t": ["a"]},
        "t_col_a",
        {2, 3},
    ),
]


@pytest.mark.parametrize("text,spec,columns,name,lines", [c[1:] for c in GENERATED_CLASHES], ids=[c[0] for c in GENERATED_CLASHES])
def test_schema_names_that_collide_with_generated_names_are_refused_before_wgpu(text, spec, columns, name, lines):
    with pytest.raises((SchemaError, LoweringError)) as info:
        schema = parse(text, YAML)
        lower(schema, MAIN, spec, columns=columns, wgsl_path=WGSL)
    err = info.value
    assert err.path == YAML and err.line in lines, str(err)
    assert name in err.message
    # At a name on that line (review helper 107: "bindings.yaml:2:" with the caret in the indentation)
    assert err.col is not None and re.match(r"[A-Za-z_]", err.span.text[err.col - 1]), str(err)


@pytest.mark.parametrize("order", ["read-first", "read_write-first"])
def test_a_read_write_column_on_a_page_read_only_in_some_variant_is_refused(order):
    pages = ['  - { name: P, kind: page, access: read, when: "M=a" }\n', '  - { name: P, kind: page, access: read_write, when: "M=b" }\n']
    if order != "read-first":
        pages.reverse()
    text = (
        "bindings:\n"
        + "".join(pages)
        + "  - { name: c, kind: column, page: P, element: u32, access: read_write }\nspecialize:\n  - { name: M, options: [a, b] }\n"
    )
    with pytest.raises((SchemaError, LoweringError)) as info:
        schema = parse(text, YAML)
        lower(schema, MAIN, {"M": "a"}, wgsl_path=WGSL)  # where P is read-only
    assert info.value.path == YAML and info.value.line == 4
    assert "read-only" in info.value.message or "read_write" in info.value.message


@pytest.mark.parametrize(
    "decl,size",
    [
        ("const WG: u32 = 64u;", "WG"),
        ("const HALF = 32;\nconst WG = HALF * 2;", "WG"),
        ("override WG: u32 = 64u;", "WG, 1"),
        ("", "(4 + 4) * 8"),
        ("", "0x40u, 1, 1"),
        ("const WG = 1u << 6u;", "WG"),
        ("", "u32(64)"),
        ("", "max(32u, 64u)"),
        ("const S = 8;", "min(S * S, 128) | 0"),
        ("const TILE = vec2u(8u, 8u);", "TILE.x * TILE.y"),
        ("const SQ = vec2<u32>(8u);", "SQ.r * SQ.g"),
        ("const A0 = 64u;\n" + "\n".join(f"const A{j} = (A{j - 1} + A{j - 1}) / 2u;" for j in range(1, 40)), "A39"),  # not exponential
    ],
)
def test_a_workgroup_size_of_consts_equal_to_the_schemas_is_accepted(decl, size):
    body = f"{decl}\n@compute @workgroup_size({size})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n}}\n"
    assert lower(parse(GOOD, YAML), body, SPEC, wgsl_path=WGSL).workgroup == (64, 1, 1)


def test_a_workgroup_size_of_a_const_chain_past_the_stack_is_refused_at_its_line_not_a_recursion_error():
    decl = "const B0 = 64u;\n" + "\n".join(f"const B{j} = B{j - 1};" for j in range(1, 400))
    body = f"{decl}\n@compute @workgroup_size(B399)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n}}\n"
    with pytest.raises(LoweringError, match=r"@workgroup_size\(B399\) cannot be checked") as err:
        lower(parse(GOOD, YAML), body, SPEC, wgsl_path=WGSL)
    assert str(err.value).startswith(f"{WGSL}:401:")


def test_a_helper_entry_points_workgroup_size_is_not_mains():
    body = "@compute @workgroup_size(32)\nfn other() {\n}\n@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n}\n"
    assert lower(parse(GOOD, YAML), body, SPEC, wgsl_path=WGSL).workgroup == (64, 1, 1)


def test_a_binding_named_like_a_builtin_the_generated_code_never_calls_still_lowers():
    # Only the builtins this schema's generated code calls are refused: `all` and `dot` hide
    # nothing the accessors need.
    schema = parse('bindings:\n  - { name: all, element: f32 }\n  - { name: dot, access: read_write, element: f32, count: "len(all)" }\n', YAML)
    lowered = lower(schema, MAIN, {}, wgsl_path=WGSL)
    assert "var<storage, read> all:" in lowered.source and "var<storage, read_write> dot:" in lowered.source


@pytest.mark.parametrize(
    "text,spec,at",
    [
        # a specialisation whose options come first: at its name, not the option spelled alike
        ("bindings: []\nspecialize:\n  - { options: [M, N], name: M }\n", {"M": "Q"}, (3, 30)),
        # a binding named 'name': at the name, not the key
        (
            "bindings:\n  - { name: name, kind: buffer, access: read, element: f32 }\n  - { name: name_get, kind: buffer, access: read, element: f32 }\n",
            {},
            None,
        ),
        # block style, the name on the item's second line
        ("bindings:\n  - kind: buffer\n    name: src\n    element: f32\n  - { name: src_get, kind: buffer, element: f32 }\n", {}, None),
        # a comment spelling the name first (helper 112: the caret went into the comment)
        ("bindings: []\nspecialize:\n  - kind: named\n    # was: name: M, options: [a]\n    name: M\n    options: [a, b]\n", {"M": "q"}, (5, 11)),
    ],
)
def test_a_schema_error_points_at_the_items_name_not_another_word_spelled_alike(text, spec, at):
    # Review helper 110: Schema.span_at took the first whole-word match on the item's line.
    with pytest.raises((SchemaError, LoweringError, SpecializationError)) as info:
        lower(parse(text, YAML), MAIN, spec, wgsl_path=WGSL)
    err = info.value
    if at is not None:
        assert (err.line, err.col) == at, str(err)
    else:
        line = err.span.text
        assert err.col is not None and line[err.col - 1 :].startswith(("name", "src")) and line[: err.col - 1].rstrip().endswith("name:"), str(err)


def test_a_column_named_with_a_wgsl_reserved_word_is_fine_it_only_ends_a_longer_name():
    schema = parse(
        "bindings:\n  - { name: cols, kind: columns, access: read }\n  - { name: out, kind: buffer, access: read_write, element: f32, count: n }\n"
        "bake:\n  - { columns: { cols: [set, type] } }\n",
        "ok.computeShader/bindings.yaml",
    )
    assert dict(schema.bake[0])["columns"] == (("cols", ("set", "type")),)


@pytest.mark.parametrize("member", ["len"])
def test_a_struct_member_named_like_a_binding_accessor_is_a_clash_said_at_the_schema(member):
    # A member `len` made `segs_len(i)` next to the binding's `segs_len()`: naga's
    # "redefinition of 'segs_len'" about generated code (review helper 168).
    yaml = f"""\
structs:
  Seg: {{ offset: u32, {member}: u32 }}
bindings:
  - {{ name: segs, kind: buffer, access: read_write, element: Seg }}
"""
    body = "@compute @workgroup_size(64)\nfn main() { }\n"
    with pytest.raises(LoweringError) as err:
        lower(parse(yaml, "t/bindings.yaml"), body)
    text = str(err.value)
    assert text.startswith("t/bindings.yaml:") and f"'segs_{member}'" in text and f"member '{member}' of binding 'segs'" in text and "rename" in text, text


def test_a_struct_member_set_x_next_to_a_member_x_is_a_clash():
    yaml = """\
structs:
  P: { x: f32, set_x: f32 }
bindings:
  - { name: ps, kind: buffer, access: read_write, element: P }
"""
    with pytest.raises(LoweringError, match="'ps_set_x'.*rename"):
        lower(parse(yaml, "t/bindings.yaml"), "@compute @workgroup_size(64)\nfn main() { }\n")


_OUT = '  - { name: out, kind: buffer, access: read_write, element: P, capacity: "n", append: true }\n'


@pytest.mark.parametrize(
    ("members", "access", "extra", "at", "says"),
    [
        ("len: f32, a: f32", "read", "", (2, 8), "the name 'src_len' is generated for member 'len' of binding 'src' and also for binding 'src' (line 4)"),
        ("x: f32, set_x: f32", "read_write", "", (2, 16), "the name 'src_set_x' is generated for member 'set_x' of binding 'src' and also for member 'x' of binding 'src' (line 2)"),
        ("count: f32", "read", _OUT, (2, 8), "the name 'out_count' is generated for member 'count' of binding 'out' and also for binding 'out_count' (line 5)"),
        ("\n    a: f32\n    len: f32\n", "read", "", (4, 5), "the name 'src_len' is generated for member 'len' of binding 'src' and also for binding 'src' (line 6)"),
    ],
    ids=["len", "set_x", "append-count", "block-style"],
)
def test_a_struct_member_clash_is_said_at_the_members_key_in_structs(members, access, extra, at, says):
    # Review helper 237: said at the binding's line with no column (bindings.yaml:4:).
    struct = f"  P:{members}" if members.startswith("\n") else f"  P: {{ {members} }}\n"
    yaml = f"structs:\n{struct}bindings:\n  - {{ name: src, kind: buffer, access: {access}, element: P }}\n" + extra
    body = "@compute @workgroup_size(64)\nfn main() { }\n"
    with pytest.raises(LoweringError) as err:
        lower(parse(yaml, "t/bindings.yaml"), body, wgsl_path="t/kernel.wgsl")
    e = err.value
    assert (e.span.path, e.span.line, e.span.col) == ("t/bindings.yaml", *at), str(e)
    assert e.message == says + "; rename one of them"
    assert e.span.text == yaml.split("\n")[at[0] - 1]


@pytest.mark.parametrize("name", ["vec3f", "vec4u", "vec2i", "vec3h", "mat2x2f", "mat4x3h", "texture_3d", "sampler_comparison"])
def test_a_struct_named_like_a_wgsl_predeclared_type_is_refused_at_its_name(name):
    # Review helper 215: `structs: { vec3f: { a: u32 } }` parsed, and a binding of element
    # vec3f then silently ran as vec3<f32>, the declared struct ignored.
    yaml = f"structs:\n  {name}: {{ a: u32 }}\nbindings:\n  - {{ name: src, kind: buffer, access: read, element: {name} }}\n"
    with pytest.raises(SchemaError) as err:
        parse(yaml, "t/bindings.yaml")
    text = str(err.value)
    assert text.startswith("t/bindings.yaml:2:") and repr(name) in text and "reserved" in text, text


def test_too_many_variants_to_enumerate_is_said_at_the_first_specialisations_name():
    # Review helper 237: `watch --all-variants` on 2^20 variants said bindings.yaml:5, no column.
    from engine_plugin.lowering import enumerate_variants

    yaml = "bindings:\n  - { name: src, kind: buffer, access: read, element: f32 }\nspecialize:\n"
    yaml += "".join(f"  - {{ name: S{i}, options: [a, b] }}\n" for i in range(20))
    with pytest.raises(SpecializationError) as err:
        enumerate_variants(parse(yaml, YAML))
    e = err.value
    assert (e.span.path, e.span.line, e.span.col, e.span.text) == (YAML, 4, 13, "  - { name: S0, options: [a, b] }")
    assert e.message == (
        "the specialize options make 1048576 variants, past the 65536 a bake enumerates; list the ones to bake under 'bake:' (or bake from a usage log)"
    )
