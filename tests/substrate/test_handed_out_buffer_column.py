"""A buffer an Output handed out (``output.buffer``) given to a page column is a page of that
Output's live elements, as it is for a buffer binding: the pooled buffer's slack behind them
holds an earlier run's data (review helper 83)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from engine_plugin import abi

pytestmark = pytest.mark.gpu

FILL_YAML = """bindings:
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: v, type: f32 }
"""
FILL_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, params.v);
}
"""
COLUMN_YAML = """bindings:
  - { name: P, kind: page, access: read }
  - { name: col, kind: column, page: P, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
  - { name: ln, kind: buffer, access: read_write, element: u32, count: "1" }
"""
COLUMN_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i == 0u) { ln_set(0u, col_len()); }
    if (i >= zero_n()) { return; }
    out_set(i, col_get(i));
}
"""


def _variant(key: str, yaml: str, wgsl: str):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl).variant()


def test_a_handed_out_buffer_is_a_page_of_its_outputs_live_elements():
    fill, column = _variant("t83/fill", FILL_YAML, FILL_WGSL), _variant("t83/column", COLUMN_YAML, COLUMN_WGSL)
    earlier = fill.run(n=640, params={"v": 7.0})  # 2,560 bytes of 7.0, back to the pool
    abi.read(earlier.outputs["dst"])
    del earlier
    gc.collect()
    out = fill.run(n=600, params={"v": 1.0}).outputs["dst"]  # the same size class: the 7.0s behind
    mine = out.buffer
    for _ in range(2):  # the second run takes the remembered page binding
        run = column.run(n=1000, inputs={"col": mine})
        assert abi.read(run.outputs["ln"])[0] == 600
        np.testing.assert_array_equal(abi.read(run.outputs["out"]), np.ones(1000, np.float32))  # past the end: the last element


APPEND_YAML = """bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, capacity: "len(src)", append: true }
determinism: float_order
"""
APPEND_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    if (src_get(i) > 0.0) { dst_append(src_get(i)); }
}
"""


def test_an_appended_buffer_as_a_page_reads_its_count_once_not_every_run(monkeypatch):
    # Review helper 85: the count behind the page's length was read from the GPU (a sync)
    # on every run, though nothing appended in between.
    import engine_plugin.runtime.output as output

    append, column = _variant("t83/append", APPEND_YAML, APPEND_WGSL), _variant("t83/column", COLUMN_YAML, COLUMN_WGSL)
    appended = append.run(n=8, inputs={"src": np.array([1, -1, 2, -1, 3, -1, -1, -1], np.float32)}).outputs["dst"]
    buffer = appended.buffer
    reads = [0]
    real = output.read_words

    def counting(*args, **kwargs):
        reads[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(output, "read_words", counting)
    for _ in range(5):
        run = column.run(n=4, inputs={"col": buffer})
        assert abi.read(run.outputs["ln"])[0] == 3  # three appended
    assert reads[0] <= 1 + 5  # the count once, and each run's ln read
