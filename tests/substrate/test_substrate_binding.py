"""page_binding and dispatches over pages: plans, params, refusals, and results against numpy."""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import PageBindingError, SchemaError
from engine_plugin.runtime.buffers import STORAGE_USAGE
from engine_plugin.substrate import Substrate, page_binding

from substrate_kernels import (
    CLAMP_WGSL,
    CLAMP_YAML,
    DOUBLE_WGSL,
    DOUBLE_YAML,
    make,
    ninth_page_yaml,
    thirty_columns_wgsl,
    thirty_columns_yaml,
)

PARTICLES_YAML = """\
bindings:
  - { name: PA,   kind: page, access: read_write }
  - { name: pos,  kind: column, page: PA, element: vec3<f32>, access: read_write }
  - { name: vel,  kind: column, page: PA, element: vec3<f32>, access: read }
  - { name: PB,   kind: page, access: read_write, atomic: true }
  - { name: hist, kind: column, page: PB, element: u32 }
"""
PARTICLES_WGSL = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) { }\n"


@pytest.fixture
def arena(gpu):
    s = Substrate(gpu, page_bytes=64 * 1024, label="binding arena")
    yield s
    s.close()


@pytest.fixture(scope="module")
def particles_lowered():
    return abi.lower(abi.parse(PARTICLES_YAML, "particles/bindings.yaml"), PARTICLES_WGSL)


def _particle_runs(s: Substrate, n: int = 10):
    with s.with_page_group("particles"):
        pos = s.alloc("vec3<f32>", n, name="p_pos")
        vel = s.alloc("vec3<f32>", n)
    hist = s.alloc("u32", 8, atomic=True)
    return pos, vel, hist


# -- page_binding on its own ----------------------------------------------------------------------
def test_page_binding_answers_each_page_and_the_column_params(arena, particles_lowered):
    pos, vel, hist = _particle_runs(arena)
    result = page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": hist})
    assert result.pages["PA"] is arena.placement(pos).page is arena.placement(vel).page
    assert result.pages["PB"] is arena.placement(hist).page
    assert dict(result.params) == {
        "col_base_pos": pos.base, "col_len_pos": 10,
        "col_base_vel": vel.base, "col_len_vel": 10,
        "col_base_hist": hist.base, "col_len_hist": 8,
    }
    assert vel.base >= pos.base + 30  # bases are words: 10 vec3 = 30 words
    with pytest.raises(TypeError):
        result.params["col_len_pos"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError):
        result.pages = {}  # type: ignore[misc]
    assert abi.page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": hist}) == result


def test_columns_of_one_page_binding_in_different_pages_are_refused_naming_both(arena, particles_lowered):
    pos = arena.alloc("vec3<f32>", 5000)  # 60 KB: the next run cannot share its page
    vel = arena.alloc("vec3<f32>", 5000)
    hist = arena.alloc("u32", 8, atomic=True)
    assert pos.page != vel.page
    with pytest.raises(PageBindingError) as info:
        page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": hist})
    msg = str(info.value)
    assert "page binding 'PA'" in msg and "column 'vel'" in msg and "column 'pos'" in msg
    assert f"page {pos.page} of substrate" in msg and f"page {vel.page} of substrate" in msg
    # At column 'vel''s name (file:line:col, as every other error: the column was missing,
    # review helper 175), with the line shown.
    assert "particles/bindings.yaml:4:13:" in msg and info.value.span.text.strip().startswith("- { name: vel")


def test_element_and_atomic_kind_mismatches_are_refused(arena, particles_lowered):
    pos, vel, hist = _particle_runs(arena)
    wrong = arena.alloc("vec4<f32>", 10)
    with pytest.raises(PageBindingError, match=r"column 'vel' is vec3<f32> but run .* holds vec4<f32>"):
        page_binding(particles_lowered, {"pos": pos, "vel": wrong, "hist": hist})
    plain_hist = arena.alloc("u32", 8)
    with pytest.raises(PageBindingError, match=r"'hist' of page binding 'PB' needs an atomic page.*stands in a plain page"):
        page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": plain_hist})
    atomic_pos = arena.alloc("vec3<f32>", 10, atomic=True)
    with pytest.raises(PageBindingError, match=r"'pos' of page binding 'PA' needs a plain page"):
        page_binding(particles_lowered, {"pos": atomic_pos, "vel": vel, "hist": hist})


def test_missing_unknown_and_stale_columns_are_refused(arena, particles_lowered):
    pos, vel, hist = _particle_runs(arena)
    with pytest.raises(PageBindingError, match="missing column 'hist'"):
        page_binding(particles_lowered, {"pos": pos, "vel": vel})
    with pytest.raises(PageBindingError, match="'heat' is not a column"):
        page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": hist, "heat": hist})
    with pytest.raises(PageBindingError, match="no live run is named 'nope'"):
        page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": "nope"})
    with pytest.raises(PageBindingError, match="takes a substrate run handle"):
        page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": np.zeros(8)})
    arena.free(vel)
    with pytest.raises(PageBindingError, match=r"column 'vel'.*stale"):
        page_binding(particles_lowered, {"pos": pos, "vel": vel, "hist": hist})


def test_run_names_and_plain_buffers_stand_for_columns(gpu, arena, particles_lowered):
    pos, vel, hist = _particle_runs(arena)
    result = page_binding(particles_lowered, {"pos": "p_pos", "vel": vel, "hist": hist})
    assert result.params["col_base_pos"] == pos.base
    own = gpu.device.create_buffer(size=12 * 7 + 8, usage=STORAGE_USAGE, label="own hist")
    hist_buf = gpu.device.create_buffer(size=32, usage=STORAGE_USAGE, label="own hist")
    result = page_binding(particles_lowered, {"pos": own, "vel": own, "hist": hist_buf})
    assert result.pages["PA"] is own and result.params["col_base_vel"] == 0 and result.params["col_len_vel"] == 7
    assert result.params["col_len_hist"] == 8
    other = Substrate(gpu, page_bytes=4096, label="other")
    try:
        other.alloc("vec3<f32>", 10, name="p_pos")
        with pytest.raises(PageBindingError, match="ambiguous"):
            page_binding(particles_lowered, {"pos": "p_pos", "vel": vel, "hist": hist})
    finally:
        other.close()


# -- dispatches -----------------------------------------------------------------------------------
def test_thirty_columns_over_three_pages_bind_three_pages_and_compute_right(gpu):
    v = make("substrate_thirty", thirty_columns_yaml(), thirty_columns_wgsl())
    assert len([b for b in v.lowered.bindings if b.role == "page"]) == 3
    assert [b.role for b in v.lowered.bindings] == ["page", "page", "page", "params"]
    assert len(v.lowered.columns) == 30
    s = Substrate(gpu, page_bytes=64 * 1024, label="thirty")
    rng = np.random.default_rng(3)
    n = 200
    inputs, a, b = {}, {}, {}
    with s.with_page_group("A"):
        for k in range(10):
            a[k] = rng.integers(-50, 50, n).astype(np.float32) / 4
            inputs[f"a{k:02d}"] = s.upload("f32", a[k])
    with s.with_page_group("B"):
        for k in range(10):
            b[k] = rng.integers(-9, 9, n).astype(np.int32)
            inputs[f"b{k:02d}"] = s.upload("i32", b[k])
    with s.with_page_group("C"):
        for k in range(10):
            inputs[f"c{k:02d}"] = s.alloc("vec2<f32>", n - 3 * k)
    assert len({inputs[name].page for name in inputs}) == 3
    v.run(n=n, inputs=inputs)
    got = s.read_many([inputs[f"c{k:02d}"] for k in range(10)])
    for k in range(10):
        prod = (a[k] * b[k].astype(np.float32))[: n - 3 * k]
        np.testing.assert_array_equal(got[k], np.stack([prod + k, -prod], axis=1))
    # The read columns were not touched.
    np.testing.assert_array_equal(abi.read(inputs["a09"]), a[9])
    s.close()


def test_a_ninth_page_is_a_schema_error():
    with pytest.raises(SchemaError, match="ninth page binding") as info:
        abi.parse(ninth_page_yaml(), "nine/bindings.yaml")
    assert info.value.path == "nine/bindings.yaml" and info.value.line == 18


def test_an_index_past_the_length_reads_the_last_element(gpu):
    v = make("substrate_clamp", CLAMP_YAML, CLAMP_WGSL)
    s = Substrate(gpu, page_bytes=4096, label="clamp")
    col = s.upload("vec2<f32>", np.arange(10, dtype=np.float32).reshape(5, 2))
    nxt = s.upload("u32", np.array([100, 101, 102], dtype=np.uint32))
    assert nxt.page == col.page  # the neighbour run is in the same page, after it
    run = v.run(n=70, inputs={"col": col, "next": nxt})
    np.testing.assert_array_equal(abi.read(run.outputs["out"]), np.tile([8.0, 9.0], (70, 1)))
    np.testing.assert_array_equal(abi.read(run.outputs["outn"]), np.full(70, 102))
    np.testing.assert_array_equal(abi.read(run.outputs["outw"]), np.full(70, np.float32(9.0).view(np.uint32)))
    s.close()


def test_page_group_plays_bind_the_same_pages_and_offsets_and_compute_the_same(gpu):
    v = make("substrate_double", DOUBLE_YAML, DOUBLE_WGSL)
    s = Substrate(gpu, page_bytes=8192, label="plays")
    seen = []
    for play in range(2):
        s.alloc("f32", 100 + play * 37)  # unrelated shared runs between plays
        with s.with_page_group("double"):
            src = s.upload("f32", np.arange(300, dtype=np.float32) + play)
            dst = s.alloc("f32", 300)
        binding = page_binding(v.lowered, {"src": src, "dst": dst})
        seen.append((id(binding.pages["P"]), dict(binding.params)))
        v.run(n=300, inputs={"src": src, "dst": dst})
        np.testing.assert_array_equal(abi.read(dst), (np.arange(300) + play) * 2.0)
        s.free_group("double")
    assert seen[0] == seen[1]
    s.close()


def test_the_particles_sample_runs_on_substrate_pages_and_matches_numpy(gpu, repo_root):
    folder = os.path.join(repo_root, "assets", "samples", "particles.computeShader")
    yaml_path, wgsl_path = os.path.join(folder, "bindings.yaml"), os.path.join(folder, "integrate.wgsl")
    with open(yaml_path) as f:
        yaml_text = f.read()
    with open(wgsl_path) as f:
        wgsl_text = f.read()
    program = abi.program(key="substrate_particles", schema=abi.parse(yaml_text, yaml_path), wgsl=wgsl_text, wgsl_path=wgsl_path)
    v = program.variant()
    rng = np.random.default_rng(11)
    n, buckets = 1000, 16
    # Multiples of 1/8 with dt 0.5 and buckets of 0.25: every step is exact in f32.
    pos0 = (rng.integers(-16, 32, (n, 3)) / 8).astype(np.float32)
    vel0 = (rng.integers(-16, 16, (n, 3)) / 8).astype(np.float32)
    params = {"dt": 0.5, "floor_y": -1.0, "bucket_size": 0.25}
    s = Substrate(gpu, page_bytes=64 * 1024, label="particles")
    with s.with_page_group("particles"):
        pos = s.upload("vec3<f32>", pos0, name="pos")
        vel = s.upload("vec3<f32>", vel0, name="vel")
    hist = s.alloc("u32", buckets, atomic=True, name="hist")
    v.run(n=n, inputs={"pos": pos, "vel": "vel", "hist": hist}, params=params)
    p = pos0 + vel0 * np.float32(0.5)
    p[:, 1] = np.maximum(p[:, 1], -1.0)
    bucket = np.minimum(np.maximum(0.0, (p[:, 1] + 1.0) / 0.25).astype(np.uint32), buckets - 1)
    np.testing.assert_array_equal(abi.read(pos), p)
    np.testing.assert_array_equal(abi.read(vel), vel0)
    np.testing.assert_array_equal(abi.read(hist), np.bincount(bucket, minlength=buckets))
    s.close()


def test_page_binding_params_handed_to_a_run_are_refused_naming_the_handles_way(gpu, arena):
    # page_binding's params name places in a page, not runs: kept across a free and a new
    # allocation at the same place they wrote another run's data (review helper 178). A run
    # takes the columns' handles (checked live every run); the params are refused, saying so.
    from engine_plugin.errors import DispatchError

    variant = make("pb_params", DOUBLE_YAML, DOUBLE_WGSL)
    src, dst = arena.alloc("f32", 6), arena.alloc("f32", 6)
    arena.write(src, np.arange(6, dtype=np.float32))
    pb = abi.page_binding(variant.lowered, {"src": src, "dst": dst})
    with pytest.raises(DispatchError, match=r"param 'col_base_src' is set from column 'src''s handle: pass the columns' substrate handles") as err:
        variant.run(6, inputs=dict(pb.pages), params=dict(pb.params))
    assert (err.value.span.path, err.value.span.line) == ("pb_params/bindings.yaml", 3)
    variant.run(6, inputs={"src": src, "dst": dst})
    assert arena.read(dst).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    arena.free(dst)
    with pytest.raises(PageBindingError, match="freed"):
        variant.run(6, inputs={"src": src, "dst": dst})  # the handles way: a freed run is refused


def test_a_page_binding_error_points_at_the_columns_name_not_a_word_like_it(gpu, arena):
    # The column's name was searched as a plain word: the caret landed on "kind: column" for a
    # column named column, or on a comment (review helper 178).
    yaml = (
        "bindings:\n"
        "  - { name: PA, kind: page, access: read_write }\n"
        "  - { kind: column, page: PA, name: column, element: vec3<f32>, access: read }  # column of PA\n"
    )
    lowered = abi.lower(abi.parse(yaml, "named/bindings.yaml"), "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) { }\n")
    wrong = arena.alloc("vec4<f32>", 4)
    with pytest.raises(PageBindingError) as err:
        page_binding(lowered, {"column": wrong})
    assert (err.value.span.line, err.value.span.col) == (3, yaml.split("\n")[2].index("name: column") + 7)


def test_a_freed_handle_given_to_a_kernel_raises_stale_run_error_naming_the_binding():
    # Review helper 209: variant.run and abi.page_binding wrapped it in a PageBindingError, which
    # `except StaleRunError` (what every other use of a freed handle raises) missed.
    from engine_plugin.errors import PageBindingError
    from engine_plugin.substrate import StaleRunError, Substrate

    yaml = "bindings:\n  - { name: P, kind: page, access: read_write }\n  - { name: c, kind: column, page: P, element: f32 }\n"
    body = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n  let i = zero_index(gid); if (i >= zero_n()) { return; }\n  c_set(i, 1.0);\n}\n"
    variant = abi.program(key="t209/stale", schema=abi.parse(yaml, "st/bindings.yaml"), wgsl=body, wgsl_path="st/kernel.wgsl").variant()
    substrate = Substrate(page_bytes=1024)
    handle = substrate.alloc("f32", 4)
    substrate.free(handle)
    for use in (lambda: variant.run(n=4, inputs={"c": handle}), lambda: abi.page_binding(variant.lowered, {"c": handle})):
        with pytest.raises(StaleRunError, match="column 'c'.*freed") as info:
            use()
        assert isinstance(info.value, PageBindingError) and info.value.path == "st/bindings.yaml"
