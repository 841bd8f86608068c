"""Line breaks: LF, CRLF and CR end a line for the ``// @when`` blocks, ``#import`` lines, every
check and every error as they do in an editor (a whole-file CR kernel kept its @when blocks in
every variant: review helper 176). The breaks WGSL (naga) reads and editors do not show (VT, FF,
NEL, U+2028, U+2029: a form feed before ``// @when`` kept the block in every variant silently,
and errors were a line off per break, review helper 178) are refused at their own line and
column, as an editor counts them."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.assets import AssetLibrary
from engine_plugin.errors import LoweringError, PluginError, SpecializationError
from engine_plugin.lowering import lower, parse

YAML = """bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: k, type: f32 }
specialize:
  - { name: MODE, options: [mul, add] }
"""
BODY = [
    "@compute @workgroup_size(64)",
    "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {",
    "    let i = zero_index(gid);",
    "    if (i >= zero_n()) { return; }",
    "    var v = src_get(i);",
    "    // @when MODE mul",
    "    v = v * params.k;",
    "    // @end",
    "    // @when MODE add",
    "    v = v + params.k;",
    "    // @end",
    "    dst_set(i, v);",
    "}",
    "",
]
BREAKS = {"CRLF": "\r\n", "CR": "\r", "VT": "\x0b", "FF": "\x0c", "NEL": "\x85", "LS": "\u2028", "PS": "\u2029"}
SRC = np.arange(4, dtype=np.float32)
WANT = {"mul": (SRC * 3).tolist(), "add": (SRC + 3).tolist()}


def _whole_file(brk: str) -> str:
    return brk.join(BODY)


def _stray(brk: str) -> str:
    """LF lines but one odd break in front of the add block's ``// @when`` and its ``// @end``
    (the editor shows them at the end of the comment lines before)."""
    lines = list(BODY)
    lines[7] = "    // @end" + brk + "    // sum"  # the mul block's end, then a comment ended by brk
    text = "\n".join(lines)
    text = text.replace("    // @when MODE add\n", "    // add" + brk + "    // @when MODE add\n")
    return text.replace("    v = v + params.k;\n    // @end", "    v = v + params.k;\n    // ok" + brk + "    // @end")


def _program(wgsl: str, key: str):
    return abi.program(key=key, schema=abi.parse(YAML, "lb/bindings.yaml"), wgsl=wgsl, wgsl_path="lb/kernel.wgsl")


def _numbers(wgsl: str, key: str) -> dict[str, list[float]]:
    program = _program(wgsl, key)
    out = {}
    for mode in ("mul", "add"):
        run = program.variant(specialize={"MODE": mode}).run(4, inputs={"src": SRC}, params={"k": 3.0})
        out[mode] = abi.read(run.outputs["dst"]).tolist()
    return out


EDITOR = {"CRLF": "\r\n", "CR": "\r"}
ODD = {"VT": "\x0b", "FF": "\x0c", "NEL": "\x85", "LS": "\u2028", "PS": "\u2029"}


@pytest.mark.gpu
@pytest.mark.parametrize("label", sorted(EDITOR))
def test_a_when_block_holds_in_its_variants_only_with_crlf_or_cr_lines(gpu, label):
    assert _numbers(_whole_file(EDITOR[label]), f"lb/whole/{label}") == WANT


@pytest.mark.parametrize("label", sorted(ODD))
def test_a_line_break_editors_do_not_show_is_refused_where_an_editor_shows_it(label):
    text = _stray(ODD[label])  # after "    // @end" on line 8: column 12
    with pytest.raises(LoweringError) as err:
        lower(parse(YAML), text, {"MODE": "mul"}, wgsl_path="lb/kernel.wgsl")
    assert (err.value.span.path, err.value.span.line, err.value.span.col) == ("lb/kernel.wgsl", 8, 12)
    assert "an editor does not" in str(err.value)


@pytest.mark.parametrize("label", sorted(ODD))
def test_one_in_a_module_or_a_source_value_is_refused_at_its_own_place(label):
    module = "fn twice(x: f32) -> f32 {" + ODD[label] + "return x * 2.0; }\n"
    with pytest.raises(LoweringError) as err:
        lower(parse(YAML), "#import twice\n" + "\n".join(BODY), {"MODE": "mul"}, wgsl_path="lb/kernel.wgsl", modules={"twice": ("lb/twice.wgsl", module)})
    assert (err.value.span.path, err.value.span.line, err.value.span.col) == ("lb/twice.wgsl", 1, 26)
    source_yaml = YAML + "  - { name: BODY, kind: source, default: v }\n"
    with pytest.raises(SpecializationError) as err2:
        lower(parse(source_yaml, "lb/bindings.yaml"), "\n".join(BODY), {"MODE": "mul", "BODY": "v" + ODD[label] + "* 2.0"})
    assert err2.value.span.path == "lb/bindings.yaml" and err2.value.span.line == 8


@pytest.mark.parametrize("label", sorted(EDITOR))
def test_the_lowered_text_has_lf_lines_only(label):
    lowered = lower(parse(YAML), _whole_file(EDITOR[label]), {"MODE": "mul"})
    assert "v = v + params.k;" not in lowered.source and "\r" not in lowered.source  # blanked in the mul variant


def test_an_error_after_crlf_or_cr_lines_names_the_line_an_editor_shows():
    for brk in EDITOR.values():
        text = brk.join(BODY).replace("src_get(i);", "src_gte(i);")
        with pytest.raises(PluginError) as err:
            _program(text, f"lb/error/{len(brk)}").variant()
        assert err.value.span.line == 5, (repr(brk), err.value.span)


@pytest.mark.gpu
@pytest.mark.parametrize("label", ["CR", "CRLF"])
def test_an_asset_with_crlf_or_cr_lines_computes_each_variant_right(gpu, tmp_path, label):
    folder = tmp_path / "assets" / "scale.computeShader"
    folder.mkdir(parents=True)
    (folder / "bindings.yaml").write_text(YAML)
    (folder / "kernel.wgsl").write_bytes(_whole_file(EDITOR[label]).encode())
    lib = AssetLibrary(str(tmp_path / "assets"), cache=str(tmp_path / "cache"))
    try:
        program = lib.load("scale.computeShader").program()
        for mode, want in WANT.items():
            run = program.variant(specialize={"MODE": mode}).run(4, inputs={"src": SRC}, params={"k": 3.0})
            assert abi.read(run.outputs["dst"]).tolist() == want, mode
    finally:
        lib.close()
