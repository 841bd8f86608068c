"""A NUL in a kernel and a very long line (review helper 176): the NUL is refused at its own
line and column (wgpu-native reads the WGSL as a C string, which ended at the NUL and lost
the rest: an error naming no line, or a wrong token), and an error on a 40 KB line shows a
window of that line around its column, not the whole line."""

from __future__ import annotations

import pytest

from engine_plugin import abi
from engine_plugin.errors import LoweringError, PluginError, Span

YAML = """bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
"""
BODY = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * 2.0);
}
"""


def _program(wgsl: str, key: str, modules=None):
    return abi.program(key=key, schema=abi.parse(YAML, "odd/bindings.yaml"), wgsl=wgsl, wgsl_path="odd/kernel.wgsl", modules=modules)


@pytest.mark.parametrize(
    "where, text, line, col",
    [
        ("mid-body", BODY.replace("* 2.0", "*\x00 2.0"), 5, 28),
        ("trailing comment", BODY + "// end\x00\n", 7, 7),
        ("end of file", BODY + "\x00", 7, 1),
    ],
)
def test_a_nul_in_the_body_is_refused_at_its_place(where, text, line, col):
    with pytest.raises(LoweringError) as err:
        _program(text, f"odd/nul/{where}").variant()
    assert err.value.span.path == "odd/kernel.wgsl"
    assert (err.value.span.line, err.value.span.col) == (line, col)
    assert "NUL" in str(err.value)


def test_a_nul_in_a_module_is_refused_at_its_place_in_the_module():
    module = "fn twice(x: f32) -> f32 { return x * 2.0; }\n// \x00\n"
    with pytest.raises(LoweringError) as err:
        _program("#import twice\n" + BODY, "odd/nul/module", modules={"twice": ("odd/twice.wgsl", module)}).variant()
    assert (err.value.span.path, err.value.span.line, err.value.span.col) == ("odd/twice.wgsl", 2, 4)


def test_an_error_on_a_very_long_line_shows_a_window_of_it_with_the_caret_under_the_column():
    line = "x" * 20_000 + "BAD" + "y" * 20_000
    shown = str(PluginError("an error", Span("odd/kernel.wgsl", 3, 20_001, line)))
    assert len(shown) < 400, len(shown)
    source, caret = shown.split("\n")[-2:]
    assert source.strip().startswith("…") and source.rstrip().endswith("…")
    assert source[caret.index("^") : caret.index("^") + 3] == "BAD"


@pytest.mark.gpu
def test_a_bracket_bomb_on_one_line_is_refused_with_a_short_message(gpu):
    bomb = "    let v = " + "(" * 20_000 + "1.0" + ")" * 20_000 + ";\n"
    text = BODY.replace("    dst_set(i, src_get(i) * 2.0);\n", bomb + "    dst_set(i, src_get(i) * 2.0);\n")
    with pytest.raises(PluginError) as err:
        _program(text, "odd/bomb").variant().run(4, inputs={"src": [1.0, 2.0, 3.0, 4.0]})
    assert "odd/kernel.wgsl:5:" in str(err.value)
    assert len(str(err.value)) < 2_000, len(str(err.value))
