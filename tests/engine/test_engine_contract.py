"""Registering products: the product contract's errors (naming the binding and its line),
sources, params and keys."""

from __future__ import annotations

import pytest

from engine_plugin import abi
from engine_plugin.engine import ENGINE_PARAMS, Engine, ProductError, fallbacks, kernel_program
from engine_plugin.errors import StaleHandleError
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

import numpy as np

from engine_support import make_world


def _program(key: str, yaml: str, wgsl: str = None):
    wgsl = wgsl or """
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
}
"""
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")


@pytest.fixture
def cpu_engine():
    return Engine(make_world(n=4), backend=NoGpuBackend())


def test_a_kernel_without_a_work_list_is_refused_with_an_example(cpu_engine):
    p = _program("contract/nolist", """
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
""")
    with pytest.raises(ProductError, match="declares its work list") as info:
        cpu_engine.register_product(p, fields=["height"])
    assert "contract/nolist/bindings.yaml" in str(info.value)


def test_a_field_of_another_type_names_the_binding_and_its_line(cpu_engine):
    p = _program("contract/types", """
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: i32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
""")
    with pytest.raises(ProductError, match="is i32 but field 'height' holds F32") as info:
        cpu_engine.register_product(p, fields={"src": "height"})
    assert info.value.line == 4


def test_unknown_fields_bindings_and_counts_are_refused(cpu_engine):
    summary = kernel_program("summary")
    with pytest.raises(ProductError, match="does not declare"):
        cpu_engine.register_product(summary, fields={"src": "nope"})
    with pytest.raises(ProductError, match="not a field input"):
        cpu_engine.register_product(summary, fields={"dst": "height"})
    with pytest.raises(ProductError, match="gives 2 fields for 1"):
        cpu_engine.register_product(summary, fields=["height", "moisture"])


def test_policy_and_work_list_must_agree(cpu_engine):
    with pytest.raises(ProductError, match="must be 'tiles'"):
        cpu_engine.register_product(kernel_program("summary"), fields=["height"], policy=ReadbackPolicy.SELECTED_TILES)
    with pytest.raises(ProductError, match="must be 'chunks'"):
        cpu_engine.register_product(kernel_program("combine"), fields=["height", "moisture"])
    with pytest.raises(ProductError, match="tiles= goes with SELECTED_TILES"):
        cpu_engine.register_product(kernel_program("summary"), fields=["height"], tiles=[(0, (0, 0))])


def test_bindings_outside_fields_outputs_and_the_work_list_are_named(cpu_engine):
    p = _program("contract/texture", """
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: img, kind: storage_texture, format: rgba8unorm, access: write, dim: 2d }
""")
    with pytest.raises(ProductError, match="'img' .*bound to nothing; pass it in inputs="):
        cpu_engine.register_product(p, fields=["height"], policy=ReadbackPolicy.NONE)
    with pytest.raises(ProductError, match="inputs= names 'nope'"):
        cpu_engine.register_product(p, fields=["height"], policy=ReadbackPolicy.NONE, inputs={"nope": 1})
    p2 = _program("contract/two", """
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: a, kind: buffer, access: read_write, element: f32, count: "n" }
  - { name: b, kind: buffer, access: read_write, element: f32, count: "n" }
""")
    with pytest.raises(ProductError, match="readback names 'c'"):
        cpu_engine.register_product(p2, fields=["height"], readback=["c"])
    with pytest.raises(ProductError, match="policy NONE reads nothing back"):
        cpu_engine.register_product(p2, fields=["height"], policy=ReadbackPolicy.NONE, readback=["a"])
    h = cpu_engine.register_product(p2, fields=["height"], readback=["b"], cpu_fallback=lambda w, job: {"b": np.zeros(job.items)})
    plan = cpu_engine.product(h).plan
    assert plan.output == "b" and plan.readback == ("b",) and [o.per_item for o in plan.outputs] == [1, 1]


def test_params_are_checked_and_engine_params_are_the_engines(cpu_engine):
    count = kernel_program("count_above")
    with pytest.raises(ProductError, match="needs param 'threshold'"):
        cpu_engine.register_product(count, fields=["height"])
    with pytest.raises(ProductError, match="unknown param 'thresh'"):
        cpu_engine.register_product(count, fields=["height"], params={"threshold": 1.0, "thresh": 2})
    with pytest.raises(ProductError, match="filled by the engine"):
        cpu_engine.register_product(count, fields=["height"], params={"threshold": 1.0, "tile_count": 5})
    assert set(ENGINE_PARAMS) >= {"tile_count", "inv_tile_count"}


def test_keys_are_unique_and_stale_handles_fail_loudly(cpu_engine):
    summary = kernel_program("summary")
    h = cpu_engine.register_product(summary, fields={"src": "height"}, cpu_fallback=fallbacks.summary)
    assert h.key == "engine/summary.computeShader(height)"
    with pytest.raises(ProductError, match="registered already"):
        cpu_engine.register_product(summary, fields={"src": "height"})
    cpu_engine.unregister_product(h)
    with pytest.raises(StaleHandleError, match="stale"):
        cpu_engine.product(h)
    again = cpu_engine.register_product(summary, fields={"src": "height"})
    assert again.key == h.key and again.generation != h.generation


def test_sources_variants_programs_and_asset_paths(cpu_engine):
    variant = kernel_program("summary").variant({"T": "f32"})
    h = cpu_engine.register_product(variant, key="v", fields=["height"], cpu_fallback=fallbacks.summary)
    assert cpu_engine.product(h).spec_values == {"T": "f32"}
    with pytest.raises(ProductError, match="already specialised"):
        cpu_engine.register_product(variant, key="v2", spec={"T": "i32"}, fields=["height"])
    with pytest.raises(ProductError, match="library="):
        cpu_engine.register_product("engine/summary.computeShader", fields=["height"])
    with pytest.raises(ProductError, match="not int"):
        cpu_engine.register_product(42, fields=["height"])
    with pytest.raises(ProductError, match="needs a cpu_fallback"):
        cpu_engine.register_product(None, fields=["height"])


def test_set_params_recomputes_everything_under_a_new_generation(make_engine):
    from engine_support import Applied, run_until_idle

    world = make_world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    h = engine.register_product(kernel_program("count_above"), fields=["height"], params={"threshold": 0.0},
                                apply=applied, cpu_fallback=fallbacks.count_above)
    run_until_idle(engine)
    generation = engine.generation(h)
    engine.set_params(h, {"threshold": 1e9})
    run_until_idle(engine)
    assert engine.generation(h) != generation and all(applied.latest[k] == 0 for k in world.keys())
    with pytest.raises(ProductError):
        engine.set_params(h, {})
    assert engine.product(h).params == {"threshold": 1e9}


def test_narrow_fields_bind_as_raw_words_only():
    w = World((8, 8), {"solid": bool}, max_chunks=2)
    engine = Engine(w, backend=NoGpuBackend())
    p = _program("contract/words", """
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: solid, kind: buffer, access: read, element: u32 }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
""")
    with pytest.raises(ProductError, match="bits: true"):
        engine.register_product(p)
    p2 = _program("contract/words2", """
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: solid, kind: buffer, access: read, element: u32, bits: true }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
""")
    assert engine.register_product(p2, cpu_fallback=lambda w, work: np.zeros(len(work.keys), np.uint32))


def test_a_missing_param_names_the_line_and_column_that_declares_it(cpu_engine):
    # Review helper 38: a reload adding a required param was refused with no file, line or column.
    count = kernel_program("count_above")
    with pytest.raises(ProductError) as info:
        cpu_engine.register_product(count, fields=["height"])
    span = info.value.span
    assert span is not None and span.path.endswith("bindings.yaml") and span.line and span.col
    declared = count.schema.text.split("\n")[span.line - 1]
    assert declared[span.col - 1 :].startswith("threshold")


@pytest.mark.parametrize("bad", [None, True, "abc", [1.0, 2.0], 1e40])
def test_set_params_refuses_values_a_registration_refuses_and_keeps_the_product_as_it_was(make_engine, bad):
    # Review helper 44: set_params checked names only; the value was refused when the GPU
    # registered anew, the product went to its CPU fallback, which computed with it (None as
    # NaN: 0 tiles above for every chunk, applied).
    from engine_plugin.errors import DispatchError

    from engine_support import run_until_idle

    world = make_world(n=8)
    engine = make_engine(world)
    got = {}
    handle = engine.register_product(
        kernel_program("count_above"), key="c", fields={"src": "height"}, params={"threshold": 0.0},
        apply=lambda r: got.update(zip(r.keys, np.asarray(r.values).reshape(-1).tolist())), cpu_fallback=fallbacks.count_above,
    )
    run_until_idle(engine)
    on_gpu = engine.product(handle).gpu is not None
    with pytest.raises(DispatchError, match="threshold"):
        engine.set_params(handle, {"threshold": bad})
    assert engine.product(handle).params == {"threshold": 0.0}
    assert (engine.product(handle).gpu is not None) == on_gpu
    world.write(1, "height", np.full(world.chunk_shape, 5.0, np.float32))
    run_until_idle(engine)
    assert got[1] == world.chunk_shape[0] * world.chunk_shape[1]  # every tile above 0.0
    with pytest.raises(DispatchError, match="threshold"):
        engine.register_product(kernel_program("count_above"), key="d", fields={"src": "height"}, params={"threshold": bad},
                                apply=lambda r: None, cpu_fallback=fallbacks.count_above)


def test_a_cpu_only_engine_refuses_a_param_value_the_kernel_cannot_take(cpu_engine):
    from engine_plugin.errors import DispatchError

    with pytest.raises(DispatchError, match="threshold"):
        cpu_engine.register_product(kernel_program("count_above"), key="c", fields={"src": "height"}, params={"threshold": None},
                                    apply=lambda r: None, cpu_fallback=fallbacks.count_above)
    assert len(cpu_engine._order) == 0
