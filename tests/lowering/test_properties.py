"""Properties of the lowering front end, over generated inputs (hypothesis).

- ``parse`` refuses anything malformed with a ``SchemaError`` and nothing else: no YAML
  library error, ``TypeError``, ``RecursionError`` ... escapes, whatever the text.
- ``// @when`` preprocessing keeps the line count for any nesting, and keeps a line exactly
  when every enclosing block holds.
- Source splicing never changes text inside comments and replaces whole identifiers only,
  and a column on a spliced line maps back to the user's own character (or identifier).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_plugin.errors import LoweringError, SchemaError
from engine_plugin.lowering import parse
from engine_plugin.lowering.preprocess import apply_when_blocks, splice_sources
from engine_plugin.lowering.schema import SpecParam

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------- parse
TOP_KEYS = ["bindings", "params", "specialize", "determinism", "workgroup", "bake", "bindigns", "extra"]
BINDING_KEYS = [
    "name", "kind", "access", "element", "count", "capacity", "live", "append", "when", "bits", "page",
    "atomic", "elemnt", "type", "options", "default",
]
SCALARS = [
    "f32", "u32", "i32", "vec3<f32>", "vec3f", "vec4<i32>", "f64", "T", "n", "len(src)", "n * 2", "max(n, 4)",
    "n + * 2", "read", "read_write", "write", "true", "false", "yes", "null", "~", "''", "'quoted'",
    '"T=f32"', '"T=f32|u32; M=a"', '"T="', "64", "-1", "0", "1e400", ".inf", ".nan", "0x10", "[8, 8]", "[]", "{}",
    "[1, 2, 3, 4]", "buffer", "page", "column", "columns", "domain_count", "bufer", "src", "P", "exact",
    "float_order", "zero_x", "var", "a b", "[f32, u32]", "[add, min]", "{ T: f32 }",
    # YAML features a hand-written file rarely has, but a fuzzer (or a bad merge) can
    "!!int 12", "!!str 12", "!!binary aGk=", "&a x", "*a", "? k : v", "|\n      block", ">-\n      folded",
]
HOSTILE = [
    "!!int abc", "!!float x", "!!foo x", "!local x", "!!python/name:os.system x", "!!timestamp 2001-13-99",
    "!!binary @@@", "{[1]: 2}", "{{a: b}: c}", "&r [*r]", "&m {k: *m}", "!!set {a, b}", "!!omap [a: 1]",
    "!!bool maybe", "!!null x", "!!seq x", "!!map x",
]


@st.composite
def yaml_value(draw, depth=0):
    choice = draw(st.integers(0, 9))
    if choice <= 5 or depth >= 2:
        return draw(st.sampled_from(SCALARS + HOSTILE) | st.text(max_size=6).map(repr))
    if choice <= 7:
        items = draw(st.lists(yaml_value(depth + 1), max_size=3))
        return "[" + ", ".join(items) + "]"
    pairs = draw(st.lists(st.tuples(st.sampled_from(BINDING_KEYS), yaml_value(depth + 1)), max_size=3))
    return "{ " + ", ".join(f"{k}: {v}" for k, v in pairs) + " }"


@st.composite
def yaml_document(draw):
    lines = []
    for key in draw(st.lists(st.sampled_from(TOP_KEYS), max_size=5)):
        style = draw(st.integers(0, 2))
        if style == 0:
            lines.append(f"{key}: {draw(yaml_value())}")
            continue
        lines.append(f"{key}:")
        for _ in range(draw(st.integers(0, 3))):
            pairs = draw(st.lists(st.tuples(st.sampled_from(BINDING_KEYS), yaml_value(1)), max_size=5))
            if style == 1:
                lines.append("  - { " + ", ".join(f"{k}: {v}" for k, v in pairs) + " }")
            else:
                for i, (k, v) in enumerate(pairs):
                    lines.append(("  - " if i == 0 else "    ") + f"{k}: {v}")
    text = "\n".join(lines) + "\n"
    # and some damage: a random splice of text somewhere
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=6)) + text[at:]
    return text


def _parse_refuses_only_with_schema_error(text: str) -> None:
    try:
        parse(text, "fuzz.yaml")
    except SchemaError as exc:
        assert exc.path == "fuzz.yaml"
        assert exc.message
        str(exc)  # renders


@FAST
@given(yaml_document())
def test_parse_raises_nothing_but_schema_error_on_yaml_ish_text(text):
    _parse_refuses_only_with_schema_error(text)


@FAST
@given(st.text(max_size=80))
def test_parse_raises_nothing_but_schema_error_on_arbitrary_text(text):
    _parse_refuses_only_with_schema_error(text)


@pytest.mark.parametrize("value", HOSTILE)
def test_parse_refuses_yaml_tags_aliases_and_odd_keys_with_schema_error(value):
    """Unknown or ill-typed tags, recursive aliases, unhashable keys: a SchemaError at the value."""
    text = f"bindings:\n  - {{ name: a, element: f32 }}\nworkgroup: {value}\n"
    with pytest.raises(SchemaError) as info:
        parse(text, "odd.yaml")
    assert (info.value.path, info.value.line) == ("odd.yaml", 3)


@pytest.mark.parametrize("text", ["!0", "!!str", "&a [*a]", "? [a]\n: b", "!!python/object:os.system x"])
def test_parse_refuses_an_odd_document_root_with_schema_error(text):
    with pytest.raises(SchemaError) as info:
        parse(text, "odd.yaml")
    assert info.value.line == 1


# ------------------------------------------------------------------------ @when blocks
SPEC = {
    "A": SpecParam("A", "named", ("x", "y", "z")),
    "B": SpecParam("B", "named", ("p", "q")),
}


@st.composite
def when_program(draw, depth=0):
    """Lines of a balanced program, and for each line the conditions of its enclosing blocks
    (None for a directive: directives are comments, kept whatever holds)."""
    lines: list[tuple[str, tuple]] = []
    for _ in range(draw(st.integers(0, 4))):
        if depth < 4 and draw(st.booleans()):
            name = draw(st.sampled_from(sorted(SPEC)))
            opts = draw(st.lists(st.sampled_from(SPEC[name].options), min_size=1, max_size=3, unique=True))
            indent = " " * draw(st.integers(0, 8))
            inner = draw(when_program(depth + 1))
            cond = (name, frozenset(opts))
            lines.append((f"{indent}// @when {name} {' '.join(opts)}", None))
            lines.extend((text, conds if conds is None else (cond,) + conds) for text, conds in inner)
            lines.append((f"{indent}//   @end", None))
        else:
            lines.append((draw(st.sampled_from(["    x = x + 1u;", "", "// plain comment", "let y = A;", "}"])), ()))
    return lines


@FAST
@given(when_program(), st.sampled_from("xyz"), st.sampled_from("pq"))
def test_when_blocks_keep_the_line_count_and_keep_a_line_exactly_when_its_blocks_hold(program, a, b):
    values = {"A": a, "B": b}
    lines = [text for text, _ in program]
    out = apply_when_blocks(lines, values, SPEC, "k.wgsl")
    assert len(out) == len(lines)
    for (text, conds), got in zip(program, out):
        holds = conds is None or all(values[name] in opts for name, opts in conds)
        assert got == (text if holds else ""), (text, conds, got)


@FAST
@given(
    st.lists(
        st.sampled_from(["// @when A x", "// @when B p q", "  // @end", "code();", "// @when C x", "// @when A w", "// @when"]),
        max_size=12,
    )
)
def test_when_blocks_either_keep_the_line_count_or_refuse_with_a_lowering_error(lines):
    try:
        out = apply_when_blocks(lines, {"A": "x", "B": "q"}, SPEC, "k.wgsl")
    except LoweringError as exc:
        assert exc.path == "k.wgsl" and 1 <= exc.line <= len(lines)
    else:
        assert len(out) == len(lines)


# --------------------------------------------------------------------------- splicing
NAMES = ["BODY", "X"]
IDENTS = NAMES + ["BODY_2", "xBODY", "BODYx", "X1", "v", "_X", "fn", "let"]
PUNCT = ["(", ")", "+", "-", ";", "{", "}", ",", ".", "=", "<", ">", "1.0", "2u"]


@st.composite
def comment_words(draw, depth=0, newlines=True):
    pool = IDENTS + PUNCT + ["*", "/", "//", "/*x*/"]
    if newlines:
        pool += ["\n"]
    words = draw(st.lists(st.sampled_from(pool), max_size=6))
    if depth < 2 and newlines and draw(st.booleans()):
        words.append(draw(block_comment(depth + 1)))
    return " ".join(words)


@st.composite
def block_comment(draw, depth=0):
    return "/* " + draw(comment_words(depth)) + " */"


@st.composite
def wgsl_segments(draw):
    """(kind, text) segments: code identifiers and punctuation, line and block comments."""
    segments = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["ident", "ident", "punct", "space", "line", "block"]))
        if kind == "ident":
            segments.append(("ident", draw(st.sampled_from(IDENTS))))
        elif kind == "punct":
            segments.append(("code", draw(st.sampled_from(PUNCT))))
        elif kind == "space":
            segments.append(("code", draw(st.sampled_from([" ", "\n", "    ", "\t"]))))
        elif kind == "line":
            segments.append(("comment", "// " + draw(comment_words(newlines=False)) + "\n"))
        else:
            segments.append(("comment", draw(block_comment())))
        segments.append(("code", " "))  # keeps neighbours from fusing into one token
    return segments


@FAST
@given(
    wgsl_segments(),
    st.fixed_dictionaries({n: st.sampled_from(["v", "(v * 2.0)", "X + BODY", "a\n  + b", ""]) for n in NAMES}),
)
def test_splicing_never_changes_comments_and_replaces_whole_identifiers_only(segments, replacements):
    text = "".join(t for _, t in segments)
    # A member after "." (spaces and comments between do not count) is no identifier of its own.
    expected, after_dot = [], False
    for kind, t in segments:
        expected.append(replacements.get(t, t) if kind == "ident" and not after_dot else t)
        if kind == "ident" or (kind == "code" and t.strip()):
            after_dot = t == "."
    expected = "".join(expected)
    spliced = splice_sources(text, replacements)
    assert "\n".join(spliced.lines) == expected
    # every output row maps to a user line, in order, covering each user line
    assert len(spliced.user_lines) == len(spliced.lines)
    assert list(spliced.user_lines) == sorted(spliced.user_lines)
    assert set(spliced.user_lines) == set(range(1, text.count("\n") + 2))


@FAST
@given(wgsl_segments())
def test_splicing_with_no_replacements_is_the_identity(segments):
    text = "".join(t for _, t in segments)
    spliced = splice_sources(text, {})
    assert "\n".join(spliced.lines) == text
    assert spliced.user_lines == tuple(range(1, text.count("\n") + 2))


# ------------------------------------------------------------ source map columns, spliced
SPLICE_SCHEMA = """\
bindings:
  - { name: src, kind: buffer, element: f32 }
specialize:
  - { name: BODY, kind: source, default: "v" }
  - { name: X, kind: source, default: "x" }
"""


@FAST
@given(
    st.lists(st.sampled_from(IDENTS + ["1.0", "(v)", "(1.0 + 2.0)"]), min_size=1, max_size=10),
    st.fixed_dictionaries({n: st.sampled_from(["v", "(v * 2.0)", "", "some_longer_expression(v, 3u)"]) for n in NAMES}),
)
def test_a_column_on_a_spliced_line_maps_back_to_the_same_character_or_its_identifier(words, replacements):
    from engine_plugin.lowering import lower

    line = "    let q = " + " + ".join(words) + ";"
    body = "@compute @workgroup_size(64)\nfn main() {\n" + line + "\n}\n"
    lowered = lower(parse(SPLICE_SCHEMA), body, replacements)
    # Where each lowered character comes from: walk the pieces of the line as the splice does.
    # A character of spliced text maps to its identifier's column; any other to itself.
    out_line = "    let q = " + " + ".join(replacements.get(w, w) for w in words) + ";"
    pieces = [("    let q = ", False)] + [x for w in words for x in ((w, w in NAMES), (" + ", False))][:-1] + [(";", False)]
    user_of, at_user = [], 0
    for text, spliced in pieces:
        if spliced:
            user_of += [("inside", at_user + 1)] * len(replacements[text])
        else:
            user_of += [("same", at_user + k + 1) for k in range(len(text))]
        at_user += len(text)
    lowered_lines = lowered.source.split("\n")
    number = lowered_lines.index(out_line) + 1
    for col in range(1, len(out_line) + 1):
        span = lowered.source_map.locate(number, col)
        kind, want = user_of[col - 1]
        assert span.line == 3 and span.col == want, (out_line, col, kind, span.col, want)
        if kind == "same":
            assert line[span.col - 1] == out_line[col - 1]
