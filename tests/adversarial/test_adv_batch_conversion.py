"""``abi.batch()`` holds every buffer a recorded run touches until the batch is submitted, so a
buffer released meanwhile is never handed to a later run of the batch (whose clear is hoisted
to the front of the submission). A chained input of another scalar type is read by a
conversion record: its source buffer is touched too."""

from __future__ import annotations

import gc

import pytest

from engine_plugin import abi

PRODUCER_YAML = """\
bindings:
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
"""
PRODUCER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, f32(i) + 1.0);
}
"""
CONSUMER_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: u32 }
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "n" }
"""
CONSUMER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * 2u);
}
"""


def _variant(key, yaml, wgsl):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl").variant()


def test_a_converted_chained_input_in_a_batch():
    prod = _variant("adv/conv_prod", PRODUCER_YAML, PRODUCER_WGSL)
    cons = _variant("adv/conv_cons", CONSUMER_YAML, CONSUMER_WGSL)
    a = prod.run(64).outputs["out"]
    with abi.batch():
        b = cons.run(64, inputs={"src": a})
    assert abi.read(b.outputs["dst"]).tolist() == [2 * (i + 1) for i in range(64)]


def test_a_converted_input_released_inside_the_batch_is_not_reused_before_it_is_read():
    prod = _variant("adv/conv_prod2", PRODUCER_YAML, PRODUCER_WGSL)
    cons = _variant("adv/conv_cons2", CONSUMER_YAML, CONSUMER_WGSL)
    run = prod.run(64)
    a = run.outputs["out"]
    with abi.batch():
        b = cons.run(64, inputs={"src": a})
        del run, a
        gc.collect()
        c = prod.run(64)  # an output of the same size: the pool's next buffer
    assert abi.read(c.outputs["out"]).tolist() == [i + 1.0 for i in range(64)]
    assert abi.read(b.outputs["dst"]).tolist() == [2 * (i + 1) for i in range(64)]
