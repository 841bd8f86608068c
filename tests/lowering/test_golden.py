"""Golden files: a few lowered sources kept in tests/lowering/golden/, reviewed as diffs.

``pytest --regen-golden`` rewrites them; review the diff before committing it. Each golden
variant is also compiled on the device, so a golden file is never only a string comparison.
"""

from __future__ import annotations

import difflib
import os

import pytest

from engine_plugin.errors import PluginError
from engine_plugin.lowering import lower, parse

from lowering_support import compile_lowered, read_asset, sample

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def _reference():
    asset = sample("reference")
    return lower(asset.schema, asset.wgsl_text, {"T": "vec3<f32>", "FOLD": "mean"}, wgsl_path=asset.wgsl_path)


def _particles():
    asset = sample("particles")
    return lower(asset.schema, asset.wgsl_text, {}, wgsl_path=asset.wgsl_path)


def _table_blend():
    asset = read_asset("tests/lowering/assets/table_blend.computeShader")
    columns = {"table": ["pos", "vel", "id"], "out": ["blend", "count"]}
    return lower(asset.schema, asset.wgsl_text, {}, columns=columns, wgsl_path=asset.wgsl_path)


CASES = {
    "reference_T-vec3f_FOLD-mean.wgsl": _reference,
    "particles.wgsl": _particles,
    "table_blend_named_columns.wgsl": _table_blend,
}


def check_golden(name: str, text: str, regen: bool) -> None:
    path = os.path.join(GOLDEN, name)
    if regen:
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        return
    if not os.path.exists(path):
        pytest.fail(f"golden file {name} is missing; create it with: pytest tests/lowering/test_golden.py --regen-golden")
    with open(path, encoding="utf-8", newline="") as f:
        want = f.read()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), f"golden/{name}", "lowered"))
        pytest.fail(f"lowered output differs from golden/{name} (rerun with --regen-golden if intended):\n{diff}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_source_matches_its_golden_file_and_compiles(gpu, regen_golden, name):
    lowered = CASES[name]()
    compile_lowered(gpu.device, lowered)
    check_golden(name, lowered.source, regen_golden)


def test_named_table_columns_become_constants_in_the_order_given():
    source = _table_blend().source
    for i, col in enumerate(("pos", "vel", "id")):
        assert f"const table_col_{col}: u32 = {i}u;" in source
    for i, col in enumerate(("blend", "count")):
        assert f"const out_col_{col}: u32 = {i}u;" in source


# -------------------------------------------------------------------- diagnostics, rendered
DIAGNOSTICS = [
    (
        "unknown binding key",
        "bindings:\n  - { name: src, kind: buffer, elemnt: f32 }\n",
        None,
    ),
    (
        "bad count expression",
        "bindings:\n  - { name: out, access: read_write, element: f32, count: \"n * * 2\" }\n",
        None,
    ),
    (
        "generated name declared by the body",
        "bindings:\n  - { name: src, kind: buffer, element: f32 }\nworkgroup: 1\n",
        "fn src_get(i: u32) -> f32 { return 0.0; }\n@compute @workgroup_size(1)\nfn main() {}\n",
    ),
    (
        "append in an exact shader",
        "bindings:\n  - { name: hits, access: read_write, element: u32, capacity: \"n\", append: true }\nworkgroup: 1\n",
        "@compute @workgroup_size(1)\nfn main() {\n    let slot = hits_append(7u);\n}\n",
    ),
]


def _render_all() -> str:
    out = []
    for title, yaml_text, body in DIAGNOSTICS:
        try:
            schema = parse(yaml_text, "demo.computeShader/bindings.yaml")
            lower(schema, body, {}, wgsl_path="demo.computeShader/kernel.wgsl")
        except PluginError as exc:
            out.append(f"== {title} ({type(exc).__name__})\n{exc}\n")
        else:
            out.append(f"== {title}: NO ERROR\n")
    return "\n".join(out)


def test_error_messages_render_like_a_compiler_with_line_and_caret(regen_golden):
    check_golden("diagnostics.txt", _render_all(), regen_golden)
