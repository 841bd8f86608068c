"""A CSR sparse matrix-vector product as it is written in public WebGPU code (bindings
``row_ptr``, ``col_idx``, ``values``), ported as it stands: names starting ``col_`` are the
user's, only the generated params' ``col_base_``/``col_len_`` prefixes are reserved."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import SchemaError

pytestmark = pytest.mark.gpu

SPMV_YAML = """\
bindings:
  - { name: row_ptr, kind: buffer, access: read, element: u32 }
  - { name: col_idx, kind: buffer, access: read, element: u32 }
  - { name: values,  kind: buffer, access: read, element: f32 }
  - { name: x,       kind: buffer, access: read, element: f32 }
  - { name: y,       kind: buffer, access: read_write, element: f32, count: "len(row_ptr) - 1" }
params:
  - { name: col_scale, type: f32 }
"""
SPMV_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = zero_index(gid);
    if (row >= zero_n()) { return; }
    var sum = 0.0;
    for (var k = row_ptr_get(row); k < row_ptr_get(row + 1u); k = k + 1u) {
        let col_k = col_idx_get(k);
        sum = sum + values_get(k) * x_get(col_k);
    }
    y_set(row, sum * params.col_scale);
}
"""


def _csr(rows: int, cols: int, density: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    dense = np.where(rng.random((rows, cols)) < density, rng.standard_normal((rows, cols)), 0.0).astype(np.float32)
    row_ptr = np.zeros(rows + 1, np.uint32)
    row_ptr[1:] = np.cumsum((dense != 0).sum(axis=1))
    nz_rows, nz_cols = np.nonzero(dense)
    return dense, row_ptr, nz_cols.astype(np.uint32), dense[nz_rows, nz_cols]


def test_a_csr_spmv_with_col_idx_runs_and_matches_numpy():
    rng = np.random.default_rng(7)
    dense, row_ptr, col_idx, values = _csr(300, 200, 0.05, rng)
    x = rng.standard_normal(200).astype(np.float32)
    program = abi.program(key="ported/spmv", schema=abi.parse(SPMV_YAML, "spmv/bindings.yaml"), wgsl=SPMV_WGSL, wgsl_path="spmv/kernel.wgsl")
    variant = program.variant()
    run = variant.run(300, inputs={"row_ptr": row_ptr, "col_idx": col_idx, "values": values, "x": x}, params={"col_scale": 0.5})
    got = abi.read(run.outputs["y"])
    np.testing.assert_allclose(got, dense.astype(np.float64) @ x * 0.5, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("yaml", "name"),
    [
        ("bindings:\n  - { name: a, element: f32 }\nparams:\n  - { name: col_base_a, type: u32 }\n", "col_base_a"),
        ("bindings:\n  - { name: col_len_b, element: f32 }\n", "col_len_b"),
    ],
)
def test_the_generated_column_params_prefixes_stay_reserved(yaml: str, name: str):
    with pytest.raises(SchemaError, match=f"{name}.*reserved"):
        abi.parse(yaml, "r/bindings.yaml")
