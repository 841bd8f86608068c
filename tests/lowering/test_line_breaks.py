"""Every line break WGSL knows (LF, CRLF, CR, VT, FF, NEL, U+2028, U+2029) ends a line for the
``// @when`` blocks, ``#import`` lines and every check as it does for naga (review helper 176:
a form feed before ``// @when`` and ``// @end`` kept a block in every variant, silently)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.assets import AssetLibrary
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


def _numbers(wgsl: str, key: str) -> dict[str, list[float]]:
    program = abi.program(key=key, schema=abi.parse(YAML, "lb/bindings.yaml"), wgsl=wgsl, wgsl_path="lb/kernel.wgsl")
    out = {}
    for mode in ("mul", "add"):
        run = program.variant(specialize={"MODE": mode}).run(4, inputs={"src": SRC}, params={"k": 3.0})
        out[mode] = abi.read(run.outputs["dst"]).tolist()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("label", sorted(BREAKS))
def test_a_when_block_holds_in_its_variants_only_whatever_the_line_breaks(gpu, label):
    assert _numbers(_whole_file(BREAKS[label]), f"lb/whole/{label}") == WANT


@pytest.mark.gpu
@pytest.mark.parametrize("label", sorted(set(BREAKS) - {"CRLF"}))
def test_one_odd_line_break_before_a_directive_still_makes_it_a_directive(gpu, label):
    assert _numbers(_stray(BREAKS[label]), f"lb/stray/{label}") == WANT


@pytest.mark.parametrize("label", sorted(BREAKS))
def test_the_lowered_text_keeps_the_users_line_numbers_with_lf_breaks(label):
    lowered = lower(parse(YAML), _whole_file(BREAKS[label]), {"MODE": "mul"})
    assert "v = v + params.k;" not in lowered.source  # blanked in the mul variant
    for brk in set(BREAKS.values()) - {"\r\n"}:
        assert brk not in lowered.source


@pytest.mark.gpu
@pytest.mark.parametrize("label", ["FF", "LS", "CR"])
def test_an_asset_with_odd_line_breaks_computes_each_variant_right(gpu, tmp_path, label):
    folder = tmp_path / "assets" / "scale.computeShader"
    folder.mkdir(parents=True)
    (folder / "bindings.yaml").write_text(YAML)
    (folder / "kernel.wgsl").write_bytes(_stray(BREAKS[label]).encode())
    lib = AssetLibrary(str(tmp_path / "assets"), cache=str(tmp_path / "cache"))
    try:
        program = lib.load("scale.computeShader").program()
        for mode, want in WANT.items():
            run = program.variant(specialize={"MODE": mode}).run(4, inputs={"src": SRC}, params={"k": 3.0})
            assert abi.read(run.outputs["dst"]).tolist() == want, mode
    finally:
        lib.close()
