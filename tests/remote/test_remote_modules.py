"""The remote tier and shared modules: an entry of an asset importing modules is found under
the key that covers the imported texts, verified (re-lowered with the modules), and a module
edit makes a new key, so the tier never serves the old module's variant."""

from __future__ import annotations

import os

from engine_plugin.assets import AssetLibrary
from engine_plugin.cache.remote import RemoteCache
from engine_plugin.lowering import enumerate_variants

SCHEMA = """bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
"""
BODY = """#import factor

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * shared_factor());
}
"""


def _tree(root, factor: str) -> None:
    os.makedirs(root / "modules", exist_ok=True)
    os.makedirs(root / "k.computeShader", exist_ok=True)
    (root / "modules" / "factor.wgsl").write_text(f"fn shared_factor() -> f32 {{\n    return {factor};\n}}\n")
    (root / "k.computeShader" / "bindings.yaml").write_text(SCHEMA)
    (root / "k.computeShader" / "kernel.wgsl").write_text(BODY)


def test_a_remote_entry_of_an_importing_asset_is_verified_and_a_module_edit_misses(redis_server, tmp_path):
    _tree(tmp_path / "farm", "2.0")
    farm = AssetLibrary(str(tmp_path / "farm"), cache=None, remote=False)
    fprog = farm.load("k.computeShader").program()
    spec = next(iter(enumerate_variants(fprog.schema)))
    assert RemoteCache(redis_server.url).put(fprog.variant_key(spec), fprog.lowered(spec))

    _tree(tmp_path / "game", "2.0")
    lib = AssetLibrary(str(tmp_path / "game"), cache=str(tmp_path / "game-cache"), remote=redis_server.url, remote_on_demand=True)
    ref = lib.load("k.computeShader")
    lowered = ref.program().lowered(spec)
    assert ref.origins([spec]) == {spec: "remote"} and lib.remote.stats().verified == 1
    assert lowered.source_map.files[2] == os.path.join(str(tmp_path / "game"), "modules", "factor.wgsl")  # rebased onto this checkout

    _tree(tmp_path / "game2", "3.0")  # the module edited: another key, not on the server
    lib2 = AssetLibrary(str(tmp_path / "game2"), cache=str(tmp_path / "game2-cache"), remote=redis_server.url, remote_on_demand=True)
    ref2 = lib2.load("k.computeShader")
    assert "return 3.0;" in ref2.program().lowered(spec).source
    assert ref2.origins([spec]) == {spec: "lowered"} and lib2.remote.stats().verified == 0
