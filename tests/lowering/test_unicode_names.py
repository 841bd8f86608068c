"""WGSL identifiers are Unicode (XID): a workgroup or private variable, a main parameter or a
local named with a non-ASCII letter lowers and computes as its ASCII twin does (review helper
184: the zeroing code cut 'wé' to 'w', and main's parameter 'gé' was "untyped"). A name that
shadows a predeclared type the generated code uses is refused at its line (helper 184:
`alias f32 = u32;` gave an f32 buffer accessors of u32 words, silently)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import LoweringError

YAML = """bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
"""
BODY = """var<workgroup> wé: array<f32, 64>;
var<private> pé: f32;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gé: vec3<u32>, @builtin(local_invocation_index) lé: u32) {
    let ï = zero_index(gé);
    wé[lé] = f32(lé);
    pé = 2.0;
    workgroupBarrier();
    if (ï >= zero_n()) { return; }
    dst_set(ï, src_get(ï) * pé + wé[lé]);
}
"""


@pytest.mark.gpu
def test_non_ascii_names_lower_and_compute_right(gpu):
    program = abi.program(key="uni/names", schema=abi.parse(YAML, "uni/bindings.yaml"), wgsl=BODY, wgsl_path="uni/kernel.wgsl")
    src = np.arange(100, dtype=np.float32)
    got = abi.read(program.variant().run(100, inputs={"src": src}).outputs["dst"])
    np.testing.assert_array_equal(got, src * 2 + (np.arange(100) % 64).astype(np.float32))


@pytest.mark.parametrize("decl", ["alias f32 = u32;", "struct vec3 { x: f32 }", "const u32 = 1;", "fn f32() -> u32 { return 1u; }"])
def test_a_name_shadowing_a_predeclared_type_the_generated_code_uses_is_refused_at_its_line(decl):
    body = decl + "\n" + BODY.replace("é", "e").replace("ï", "i")
    with pytest.raises(LoweringError, match="predeclared") as err:
        abi.lower(abi.parse(YAML, "uni/bindings.yaml"), body, wgsl_path="uni/kernel.wgsl")
    assert (err.value.span.path, err.value.span.line) == ("uni/kernel.wgsl", 1)
