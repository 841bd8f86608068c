"""A run's or a product's refusal names the user's bindings.yaml line and column, with the
line and a caret under the entry it is about (the brief: file, line and column)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.engine import Engine, ProductError
from engine_plugin.errors import DispatchError
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

pytestmark = pytest.mark.gpu

YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src,    kind: buffer, access: read, element: f32 }
  -   name: out
      kind: buffer
      access: read_write
      element: vec4<f32>
      count: "n"
params:
    - { name: a, type: f32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, vec4<f32>(params.a * src_get(chunks_get(i))));
}
"""


def _program():
    return abi.program(key="t15/errcols", schema=abi.parse(YAML, "t15/errcols/bindings.yaml"), wgsl=WGSL, wgsl_path="t15/errcols/kernel.wgsl")


@pytest.mark.parametrize(
    ("kwargs", "line", "col"),
    [
        ({"inputs": {"chunks": np.zeros(4, np.uint32), "src": np.zeros(4, np.complex64)}, "params": {"a": 1.0}}, 3, 5),  # a flow mapping
        ({"inputs": {"chunks": np.zeros(4, np.uint32), "src": np.zeros(4, np.float32)}, "params": {}}, 10, 7),  # deeper indentation
        ({"inputs": {"chunks": np.zeros(4, np.uint32), "src": np.zeros(4, np.float32)}, "params": {"a": "z"}}, 10, 7),
    ],
)
def test_dispatch_errors_name_the_line_and_column_with_a_caret(kwargs, line, col):
    variant = _program().variant()
    with pytest.raises(DispatchError) as info:
        variant.run(4, **kwargs)
    err = info.value
    assert (err.path, err.line, err.col) == ("t15/errcols/bindings.yaml", line, col)
    text = str(err)
    assert text.startswith(f"t15/errcols/bindings.yaml:{line}:{col}: ")
    source, caret = text.splitlines()[1:3]
    assert source.strip() == YAML.splitlines()[line - 1].strip()
    assert caret.index("^") - 4 == col - 1  # under the entry's first character


def test_a_product_contract_refusal_names_the_line_and_column():
    world = World((4, 4), {"h": np.float32}, max_chunks=4)
    engine = Engine(world, backend=NoGpuBackend())
    with pytest.raises(ProductError) as info:  # its field input names no world field
        engine.register_product(_program(), key="p", fields={"src": "nope"}, apply=lambda r: None, params={"a": 1.0}, policy=ReadbackPolicy.SUMMARY)
    err = info.value
    assert err.line == 3 and err.col == 5, str(err)
    assert str(err).startswith("t15/errcols/bindings.yaml:3:5: ")
    assert "^" in str(err)
