"""WGSL's global directives (enable, requires, diagnostic) opening a body or a module go above
the lowering's declarations, where WGSL wants them; their errors name the user's line
(helper 72: they were refused as "written after first global declaration")."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import CompileError

pytestmark = pytest.mark.gpu

YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
"""
BODY = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * 2.0);
}
"""


@pytest.mark.parametrize("directives", [
    "diagnostic(off, derivative_uniformity);\n",
    "requires readonly_and_readwrite_storage_textures;\n",
    "// a comment first\n  diagnostic(off,\n    derivative_uniformity);  requires readonly_and_readwrite_storage_textures;\n",
])
def test_directives_opening_the_body_compile_and_run(directives):
    key = f"t/directives{abs(hash(directives))}"
    v = abi.program(key=key, schema=abi.parse(YAML), wgsl=directives + BODY).variant()
    got = abi.read(v.run(n=3, inputs={"src": np.array([1, 2, 3], np.float32)}).outputs["dst"])
    assert got.tolist() == [2.0, 4.0, 6.0]
    src = v.lowered.source
    first = src.index(directives.split("\n")[0].strip() if not directives.startswith("//") else "diagnostic(off")
    assert first < src.index("@group(0)")  # above every generated declaration


def test_enable_f16_works_where_the_adapter_has_shader_f16(gpu):
    if "shader-f16" not in gpu.device.features:
        pytest.skip("this adapter has no shader-f16")
    body = "enable f16;\n" + BODY.replace("src_get(i) * 2.0", "f32(f16(src_get(i)) * 2.0h)")
    v = abi.program(key="t/directives_f16", schema=abi.parse(YAML), wgsl=body).variant()
    assert abi.read(v.run(n=2, inputs={"src": np.array([1.5, 3.0], np.float32)}).outputs["dst"]).tolist() == [3.0, 6.0]


def test_a_bad_directive_is_reported_at_the_users_line_and_column():
    body = "\n  enable no_such_extension;\n" + BODY
    with pytest.raises(CompileError) as info:
        abi.program(key="t/directives_bad", schema=abi.parse(YAML, "d/bindings.yaml"), wgsl=body, wgsl_path="d/kernel.wgsl").variant()
    assert (info.value.span.path, info.value.span.line) == ("d/kernel.wgsl", 2)
    assert info.value.span.col is not None and info.value.span.col >= 10  # at the extension's name, not column 1



def test_a_hoisted_directive_leaves_the_header_first_so_a_shared_cache_entry_verifies():
    # The hoisted directive became the first line: the cache's check of another client's
    # entry (which reads the header comment there) refused an identical one (helper 76).
    from engine_plugin.cache.entry import encode_entry
    from engine_plugin.cache.verify import verify_entry
    from engine_plugin.lowering.fingerprint import variant_key
    from engine_plugin.lowering.modules import from_mapping, resolve_imports
    from engine_plugin.lowering.variants import resolve_spec

    schema = abi.parse(YAML, "k.computeShader/bindings.yaml")
    wgsl = "diagnostic(off, derivative_uniformity);\n" + BODY
    spec = resolve_spec(schema, None, None)
    lowered = abi.lower(schema, wgsl, spec, wgsl_path="k.computeShader/kernel.wgsl")
    assert lowered.source.startswith("// engine_plugin: lowered from ")
    key = variant_key(schema.text, wgsl, spec, resolve_imports(wgsl, "k.computeShader/kernel.wgsl", from_mapping(None)))
    _, how = verify_entry(key, encode_entry(key, lowered, signed=False), schema=schema, wgsl=wgsl, spec=spec, wgsl_path="k.computeShader/kernel.wgsl")
    assert how == "relowered"
