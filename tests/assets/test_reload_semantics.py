"""What a reload does: last good program kept on failure, diagnostics in the user's files,
body-only vs layout classification, eager recompiles for variants in use only, and every
wgpu call on the polling thread."""

from __future__ import annotations

import os
import threading
import time

import pytest
import wgpu
from asset_support import KERNEL_WITH_GAIN, SCHEMA, SCHEMA_WITH_GAIN, kernel, pump, run_scale, write

pytestmark = pytest.mark.gpu


def _save(lib, ref, folder, name, text):
    write(os.path.join(folder, name), text)
    lib.request_reload(ref.path)  # without an observer: the same path a file event takes


def test_a_broken_edit_keeps_the_last_good_program_running_and_a_fix_clears_diagnostics(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    folder = ref.folder
    errors = []
    ref.on_error(errors.append)

    _save(lib, ref, folder, "kernel.wgsl", kernel("heigth"))  # a typo: an unknown identifier
    pump(lib, lambda: ref.diagnostics is not None, what="the diagnostics")
    assert ref.generation == 0
    first_line = ref.diagnostics.splitlines()[0]
    assert os.path.join("k.computeShader", "kernel.wgsl") + ":6:" in first_line, ref.diagnostics
    assert "heigth" in ref.diagnostics and "^" in ref.diagnostics  # the line and a caret
    assert len(errors) == 1 and errors[0].error is ref.error
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]  # still the old program, dispatched and read back

    _save(lib, ref, folder, "kernel.wgsl", kernel(3.0))
    pump(lib, lambda: ref.generation == 1, what="the fix")
    assert ref.diagnostics is None and ref.error is None
    assert run_scale(ref) == [3.0, 6.0, 9.0, 12.0]


def test_a_broken_schema_edit_names_the_bindings_yaml_line(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    run_scale(ref)
    _save(lib, ref, ref.folder, "bindings.yaml", SCHEMA.replace("access: read_write", "acess: read_write"))
    pump(lib, lambda: ref.diagnostics is not None, what="the diagnostics")
    assert os.path.join("k.computeShader", "bindings.yaml") + ":3:" in ref.diagnostics.splitlines()[0], ref.diagnostics
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]


def test_reverting_to_the_live_content_clears_diagnostics_without_a_reload(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    program = ref.program()
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel("nope"))
    pump(lib, lambda: ref.diagnostics is not None)
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(2.0))
    pump(lib, lambda: ref.diagnostics is None, what="the diagnostics to clear")
    assert ref.generation == 0 and ref.program() is program


def test_the_program_is_the_same_object_until_the_content_changes(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    assert lib.load("k.computeShader") is ref and lib.load("k.computeShader/bindings.yaml") is ref
    program = ref.program()
    lib.request_reload()
    pump(lib, lambda: lib.idle)
    assert ref.program() is program and ref.generation == 0
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(5.0))
    pump(lib, lambda: ref.generation == 1)
    assert ref.program() is not program
    assert ref.program().key == "k.computeShader"


def test_a_body_only_edit_says_so_and_names_the_variants_it_invalidated(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    old_program = ref.program()
    f32 = old_program.variant({"T": "f32"})
    i32 = old_program.variant({"T": "i32"})
    events = []
    ref.on_reload(events.append)
    _save(lib, ref, ref.folder, "kernel.wgsl", "// a comment moves every line\n" + kernel(4.0))
    pump(lib, lambda: ref.generation == 1)
    (event,) = events
    assert event.kind == "body" and event.body_only
    assert set(event.invalidated) == {f32.spec, i32.spec}
    assert event.layout_changed == ()
    assert set(event.recompiled) == {f32.spec, i32.spec}
    assert event.previous is old_program and event.program is ref.program()
    assert run_scale(ref, T="i32") == [4, 8, 12, 16]


def test_a_schema_edit_that_changes_the_plan_is_a_layout_change(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    ref.program().variant({"T": "f32"})
    # Same bindings, but the output is sized differently: hosts must reallocate.
    _save(lib, ref, ref.folder, "bindings.yaml", SCHEMA.replace('count: "len(src)"', 'count: "len(src) * 2"'))
    (event,) = pump(lib, lambda: ref.generation == 1)
    assert event.kind == "layout" and event.files == ("bindings.yaml",)
    assert [s.label() for s in event.layout_changed] == ["T=f32"]


def test_a_comment_in_the_schema_is_still_body_only(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    ref.program().variant({"T": "f32"})
    _save(lib, ref, ref.folder, "bindings.yaml", "# moved every line down\n" + SCHEMA)
    (event,) = pump(lib, lambda: ref.generation == 1)
    assert event.kind == "body" and event.files == ("bindings.yaml",)


def test_only_variants_in_use_are_recompiled_eagerly_the_rest_lazily(asset_root, make_library):
    from engine_plugin.runtime import compile_count, lowering_count

    lib = make_library(asset_root, cache=None)
    ref = lib.load("k.computeShader")
    ref.program().variant({"T": "f32"})
    ref.program().variant({"T": "u32"})
    compiles, lowerings = compile_count(), lowering_count()
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(11.0))
    (event,) = pump(lib, lambda: ref.generation == 1)
    assert sorted(s.label() for s in event.recompiled) == ["T=f32", "T=u32"]
    assert compile_count() - compiles == 2 and lowering_count() - lowerings == 2
    assert set(ref.program().variants) == set(event.recompiled)
    assert run_scale(ref, T="i32") == [11, 22, 33, 44]  # lowered and compiled on first use
    assert lowering_count() - lowerings == 3


def test_an_asset_nobody_uses_yet_is_still_validated_by_compiling_one_variant(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")  # no variant requested
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel("oops"))
    pump(lib, lambda: ref.diagnostics is not None)
    assert "kernel.wgsl:6:" in ref.diagnostics


def test_removing_an_option_that_is_in_use_is_refused_with_the_yaml_line(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    run_scale(ref, T="u32")
    _save(lib, ref, ref.folder, "bindings.yaml", SCHEMA.replace("[f32, i32, u32]", "[f32, i32]"))
    pump(lib, lambda: ref.diagnostics is not None)
    assert "bindings.yaml:5" in ref.diagnostics and "'u32'" in ref.diagnostics, ref.diagnostics
    assert run_scale(ref, T="u32") == [2, 4, 6, 8]


def test_a_reload_compiles_its_pipelines_off_the_polling_thread_and_swaps_them_on_it(asset_root, make_library, gpu, monkeypatch):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    run_scale(ref)
    calls = []
    cls = type(gpu.device)
    for name in ("create_shader_module", "create_compute_pipeline", "create_bind_group_layout", "create_buffer"):
        original = getattr(cls, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            calls.append((_name, threading.get_ident()))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, spy)
    listener_threads = []
    ref.on_reload(lambda e: listener_threads.append(threading.get_ident()))
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(12.0))
    pump(lib, lambda: ref.generation == 1)
    compiles = {t for name, t in calls if name in ("create_shader_module", "create_compute_pipeline")}
    assert compiles and threading.get_ident() not in compiles  # the game thread never waits for a compile
    assert listener_threads == [threading.get_ident()]  # the swap happens in poll, on its thread


def test_a_listener_that_raises_does_not_stop_the_others_or_the_poll(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    got = []
    ref.on_reload(lambda e: 1 / 0)
    unsubscribe = ref.on_reload(got.append)
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(13.0))
    pump(lib, lambda: ref.generation == 1)
    assert len(got) == 1
    unsubscribe()
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(14.0))
    pump(lib, lambda: ref.generation == 2)
    assert len(got) == 1


def test_a_broken_asset_can_load_lazily_and_recover_under_watch(asset_root, make_library):
    folder = os.path.join(asset_root, "k.computeShader")
    write(os.path.join(folder, "bindings.yaml"), "bindings: [")
    lib = make_library(asset_root)
    from engine_plugin.errors import SchemaError

    with pytest.raises(SchemaError):
        lib.load("k.computeShader")
    ref = lib.load("k.computeShader", strict=False)
    assert "bindings.yaml" in ref.diagnostics
    with pytest.raises(SchemaError):
        ref.program()
    _save(lib, ref, folder, "bindings.yaml", SCHEMA)
    (event,) = pump(lib, lambda: ref.generation == 1)
    assert event.previous is None and event.kind == "layout"
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]


def test_a_second_wgsl_file_is_reported_not_guessed(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    _save(lib, ref, ref.folder, "other.wgsl", kernel(1.0))
    pump(lib, lambda: ref.diagnostics is not None)
    assert "exactly one .wgsl" in ref.diagnostics
    os.unlink(os.path.join(ref.folder, "other.wgsl"))
    lib.request_reload(ref.path)
    pump(lib, lambda: ref.diagnostics is None)
    assert ref.generation == 0


def test_paths_outside_the_root_or_not_assets_are_refused(asset_root, make_library):
    from engine_plugin.errors import AssetError

    lib = make_library(asset_root)
    with pytest.raises(AssetError, match="outside"):
        lib.load("../elsewhere.computeShader")
    with pytest.raises(AssetError, match="computeShader folder"):
        lib.load("k.computeShader/kernel.wgsl")


def test_a_reload_failing_in_poll_leaves_the_program_registry_as_it_was(asset_root, make_library):
    import time

    from engine_plugin.runtime.program import registered_program

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    run_scale(ref)  # f32 in use
    old = ref.program()
    _save(lib, ref, ref.folder, "bindings.yaml", SCHEMA.replace("[f32, i32, u32]", "[f32, i32]"))
    deadline = time.monotonic() + 10
    while lib.pending == 0:  # prepared by the worker, not yet applied
        assert time.monotonic() < deadline, "the reload was never prepared"
        time.sleep(0.005)
    run_scale(ref, T="u32")  # a variant the new schema drops, made after the worker read the asset
    results = lib.poll()
    assert results and ref.diagnostics is not None and "u32" in ref.diagnostics
    assert ref.program() is old
    assert registered_program(ref.path, lib._context()) is old  # the rejected program never stood
    assert run_scale(ref, T="u32") == [2, 4, 6, 8]


def test_a_body_only_reload_swaps_the_pipeline_into_the_same_variant_and_keeps_its_bind_groups(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    variant = ref.program().variant({"T": "f32"})
    groups = dict(variant._bind_groups)
    assert groups
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(3.0))  # a body-only edit: the scale
    events = pump(lib, lambda: ref.generation == 1)
    assert events[-1].kind == "body"
    assert ref.program().variant({"T": "f32"}) is variant  # the same object, new pipeline
    assert variant.program is ref.program()
    assert run_scale(ref) == [3.0, 6.0, 9.0, 12.0]
    assert all(variant._bind_groups.get(k, (None,))[0] is g[0] for k, g in groups.items())  # kept and reused


def test_a_layout_reload_makes_a_new_variant(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    run_scale(ref)
    variant = ref.program().variant({"T": "f32"})
    _save(lib, ref, ref.folder, "bindings.yaml", SCHEMA.replace('count: "len(src)"', 'count: "len(src) + 0"'))
    events = pump(lib, lambda: ref.generation == 1)
    assert events[-1].kind == "layout"
    assert ref.program().variant({"T": "f32"}) is not variant


class _Held:
    """Stands in for engine code that kept the Program object it got before a reload."""

    def __init__(self, program):
        self._program = program

    def program(self):
        return self._program


def test_after_a_body_only_reload_an_old_program_object_answers_as_the_new_one(asset_root, make_library):
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    old_program = ref.program()
    in_use = old_program.variant({"T": "f32"})  # swapped in place by the reload
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(5.0))
    (event,) = pump(lib, lambda: ref.generation == 1)
    assert event.kind == "body"
    held = _Held(old_program)
    # the variant in use and one the old object never made both run the new kernel
    assert run_scale(held) == [5.0, 10.0, 15.0, 20.0]
    assert run_scale(held, T="i32") == [5, 10, 15, 20]
    assert old_program.variant({"T": "f32"}) is in_use is ref.program().variant({"T": "f32"})
    assert old_program.wgsl == ref.program().wgsl and old_program.variants == ref.program().variants
    # a second reload: the first object still follows
    _save(lib, ref, ref.folder, "kernel.wgsl", kernel(7.0))
    pump(lib, lambda: ref.generation == 2)
    assert run_scale(held, T="u32") == [7, 14, 21, 28]


def test_a_forged_local_entry_is_refused_and_the_variant_lowered_again(asset_root, make_library, tmp_path):
    """A cache entry re-encoded under another variant's key (its checksum recomputed, so it
    decodes) is not served: it was not lowered from this asset's text and spec."""
    import shutil

    from engine_plugin.cache import VariantCache

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    f32 = ref.program().variant({"T": "f32"})
    i32_key = ref.program().variant_key(ref.program().variant({"T": "i32"}).spec)
    cache = VariantCache(str(tmp_path / "cache"))
    cache.put(i32_key, f32.lowered)  # forged: the f32 program under the i32 variant's key
    # Another asset path over the same texts: a new Program asks the store (the same key).
    shutil.copytree(os.path.join(asset_root, "k.computeShader"), os.path.join(asset_root, "k2.computeShader"))
    other = make_library(asset_root).load("k2.computeShader")
    import numpy as np

    from engine_plugin import abi

    variant = other.program().variant({"T": "i32"})
    assert variant.lowered.spec.as_dict() == {"T": "i32"}  # not the forged f32 program
    out = abi.read(variant.run(n=4, inputs={"src": np.arange(1, 5, dtype=np.int32)}).outputs["dst"])
    assert out.dtype == np.int32 and out.tolist() == [2, 4, 6, 8]
    assert other._store.foreign_entries == 1
    assert VariantCache(str(tmp_path / "cache")).get(i32_key).spec.as_dict() == {"T": "i32"}  # overwritten by the honest lowering


def test_a_forged_local_entry_is_refused_by_prefetch_and_baked_again_by_bake(asset_root, make_library, tmp_path):
    """Review helper 28: prefetch put the forged entry into the memory tier unverified (and
    then served it), and bake skipped it as already baked."""
    import shutil

    import numpy as np

    from engine_plugin import abi
    from engine_plugin.bake import bake
    from engine_plugin.cache import VariantCache

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    f32 = ref.program().variant({"T": "f32"})
    i32_key = ref.program().variant_key(ref.program().variant({"T": "i32"}).spec)
    cache_dir = str(tmp_path / "cache")
    VariantCache(cache_dir).put(i32_key, f32.lowered)  # forged: the f32 program under the i32 key
    shutil.copytree(os.path.join(asset_root, "k.computeShader"), os.path.join(asset_root, "k2.computeShader"))
    fresh = make_library(asset_root)
    fresh.prefetch({"k2.computeShader": [{"T": "i32"}]})
    variant = fresh.load("k2.computeShader").program().variant({"T": "i32"})
    assert variant.lowered.spec.as_dict() == {"T": "i32"}
    out = abi.read(variant.run(n=4, inputs={"src": np.arange(1, 5, dtype=np.int32)}).outputs["dst"])
    assert out.dtype == np.int32 and out.tolist() == [2, 4, 6, 8]

    VariantCache(cache_dir).put(i32_key, f32.lowered)  # forged again, then a bake over it
    report = bake([asset_root], cache_dir)
    assert not report.failures
    assert VariantCache(cache_dir).get(i32_key).spec.as_dict() == {"T": "i32"}  # baked again, not skipped


def test_a_plain_variant_cache_store_never_serves_another_variants_lowering(tmp_path):
    # Review helper 29: abi.program(store=VariantCache) took store.get() on trust.
    from engine_plugin import abi
    from engine_plugin.cache import VariantCache
    from engine_plugin.lowering import parse, resolve_spec

    yaml = 'bindings:\n  - { name: dst, kind: buffer, access: read_write, element: T, count: "n" }\nspecialize:\n  - { name: T, options: [f32, i32] }\n'
    body = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    dst_set(i, T(7));\n}\n"
    schema = parse(yaml, "k/bindings.yaml")
    cache = VariantCache(str(tmp_path / "cache"))
    f32 = abi.program(key="t/plain_store_f32", schema=schema, wgsl=body).variant({"T": "f32"})
    prog = abi.program(key="t/plain_store", schema=schema, wgsl=body, store=cache)
    cache.put(prog.variant_key(resolve_spec(schema, {"T": "i32"})), f32.lowered)
    v = prog.variant({"T": "i32"})
    out = abi.read(v.run(n=3).outputs["dst"])
    assert v.lowered.spec.as_dict() == {"T": "i32"} and out.dtype.kind == "i" and out.tolist() == [7, 7, 7]


def test_an_entry_lowered_before_a_module_changed_is_not_served_under_the_new_key(tmp_path, make_library):
    # Review helper 29: the derivation check compared the schema and body, not the modules.
    import numpy as np

    from engine_plugin import abi
    from engine_plugin.cache import VariantCache
    from engine_plugin.lowering import resolve_spec

    root = str(tmp_path / "assets")
    folder = os.path.join(root, "k.computeShader")
    os.makedirs(folder)
    os.makedirs(os.path.join(root, "modules"))
    mod = os.path.join(root, "modules", "val.wgsl")
    with open(mod, "w") as f:
        f.write("fn val() -> f32 { return 1.0; }\n")
    with open(os.path.join(folder, "bindings.yaml"), "w") as f:
        f.write('bindings:\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\n')
    with open(os.path.join(folder, "kernel.wgsl"), "w") as f:
        f.write(
            "#import val\n@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
            "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    dst_set(i, val());\n}\n"
        )
    cache_dir = str(tmp_path / "cache")
    old = make_library(root, cache=cache_dir).load("k.computeShader").variant().lowered
    with open(mod, "w") as f:
        f.write("fn val() -> f32 { return 2.0; }\n")
    ref = make_library(root, cache=cache_dir).load("k.computeShader")
    prog = ref.program()
    VariantCache(cache_dir).put(prog.variant_key(resolve_spec(prog.schema, {})), old)  # stale, under the new key
    np.testing.assert_array_equal(abi.read(ref.variant().run(n=2).outputs["dst"]), [2.0, 2.0])


def test_a_crlf_body_importing_a_module_lowers_through_the_program_api_and_a_refused_entry_is_a_miss(tmp_path):
    # Review helper 39: lower() read the CRLF body, Program.imports() did not ("malformed
    # '#import'"); a cache entry refused by its derivation counted as a hit.
    from engine_plugin import abi
    from engine_plugin.cache import VariantCache
    from engine_plugin.lowering import enumerate_variants, parse, resolve_spec

    schema_text = (
        'bindings:\r\n  - { name: dst, kind: buffer, access: read_write, element: T, count: "n" }\r\nspecialize:\r\n  - { name: T, options: [f32, i32] }\r\n'
    )
    body = "#import base\n@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    dst_set(i, T(base_f()));\n}\n".replace(
        "\n", "\r\n"
    )
    modules = {"base": ("m/base.wgsl", "fn base_f() -> f32 {\n    return 3.0;\n}\n")}
    schema = parse(schema_text, "k/bindings.yaml")
    cache = VariantCache(str(tmp_path / "cache"))
    prog = abi.program(key="t/crlf_import", schema=schema, wgsl=body, wgsl_path="k/kernel.wgsl", modules=modules, store=cache)
    f32, i32 = (resolve_spec(schema, {"T": t}) for t in ("f32", "i32"))
    assert set(enumerate_variants(schema)) == {f32, i32}
    assert abi.read(prog.variant({"T": "f32"}).run(n=2).outputs["dst"]).tolist() == [3.0, 3.0]
    cache.put(prog.variant_key(i32), prog.lowered(f32))  # f32's lowering filed under i32's key
    before = cache.stats()
    assert prog.lowered(i32).spec == i32
    after = cache.stats()
    assert after.hits == before.hits and after.misses == before.misses + 1


def test_a_second_library_in_one_process_serves_from_its_own_cache(tmp_path, asset_root, make_library):
    # Review helper 39: the standing program kept the first library's store: the second
    # library's cache saw nothing, and its variants went into the first's (perhaps closed) cache.
    from engine_plugin.cache import VariantCache

    first = make_library(asset_root, cache=str(tmp_path / "one"))
    first.load("k.computeShader").program().variant({"T": "f32"})
    first.close()
    second = make_library(asset_root, cache=str(tmp_path / "two"))
    ref = second.load("k.computeShader")
    assert ref.program().store is ref._store
    ref.program().variant({"T": "i32"})
    assert VariantCache(str(tmp_path / "two")).stats(scan=True).entries >= 1


def test_a_read_found_unchanged_before_a_newer_reload_was_applied_is_read_again(asset_root, make_library):
    # Review helper 80: edit C was prepared; the file went back to the live A (an undo) and
    # its read judged A unchanged against the live A; poll() then applied C, and dropped A's
    # read as unchanged: C stayed live for good while every file said A.
    import time

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    path = os.path.join(ref.folder, "kernel.wgsl")
    job = lib._job_for(os.path.abspath(ref.folder))
    write(path, kernel(3.0))
    edit = job(1, time.monotonic())  # C, prepared
    write(path, kernel(2.0))
    undo = job(2, time.monotonic())  # A again: unchanged against the live A
    assert undo.unchanged
    lib._deliver(edit)
    lib.poll()  # C applied
    assert run_scale(ref) == [3.0, 6.0, 9.0, 12.0]
    lib._deliver(undo)  # the undo's read lands after it
    lib.poll()
    pump(lib, lambda: ref.generation == 2, what="the files' content read again")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]


@pytest.mark.parametrize("broken", [kernel("3.0 +"), kernel("heigth"), SCHEMA + "params: [\n"])
def test_a_good_save_waiting_for_poll_is_not_lost_to_a_broken_one_after_it(asset_root, make_library, broken):
    # Review helper 148: a good save read and lowered, waiting for poll() (a slow frame), was
    # superseded by a broken save read before that poll: the game kept the save before both,
    # and the good one was never applied nor mentioned. A body error lowers fine and fails only
    # to compile, at poll(); a schema error fails already on the worker.
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    folder = ref.folder
    delivered = []
    deliver = lib.service._deliver
    lib.service._deliver = lambda prepared: (delivered.append(prepared.seq), deliver(prepared))  # reads handed to poll()

    def prepared(count: int) -> None:  # read and lowered on the worker, with no poll() meanwhile
        deadline = time.monotonic() + 30
        while len(delivered) < count:
            assert time.monotonic() < deadline, f"read {count} was never prepared"
            time.sleep(0.005)

    write(os.path.join(folder, "kernel.wgsl"), kernel(5.0))
    lib.request_reload(ref.path)
    prepared(1)
    name = "bindings.yaml" if broken.startswith("bindings") else "kernel.wgsl"
    write(os.path.join(folder, name), broken)
    lib.request_reload(ref.path)
    prepared(2)
    results = pump(lib, lambda: ref.diagnostics is not None and lib.idle, what="the broken save's report")
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["ReloadEvent", "ReloadFailure"], [r.describe() for r in results]
    assert ref.generation == 1 and results[1].generation == 1
    assert run_scale(ref) == [5.0, 10.0, 15.0, 20.0]  # the last good save runs


def test_a_second_library_applying_an_older_read_never_swaps_it_into_the_newer_program(asset_root, make_library, tmp_path):
    # Review helper 148: two libraries over one folder share programs. B read save 2; A applied
    # save 2, then save 3; B's poll then swapped save 2's pipeline into the variants A's live
    # program holds: both ran save 2 for good while the disk (and A's generation) said 3.
    a = make_library(asset_root, cache=str(tmp_path / "cache_a"))
    b = make_library(asset_root, cache=str(tmp_path / "cache_b"))
    ra, rb = a.load("k.computeShader"), b.load("k.computeShader")
    assert run_scale(ra) == [2.0, 4.0, 6.0, 8.0]
    folder = ra.folder
    write(os.path.join(folder, "kernel.wgsl"), kernel(5.0))
    a.request_reload(ra.path)
    b.request_reload(rb.path)  # B reads save 2 and holds it, unpolled
    pump(a, lambda: ra.generation == 1, what="A applying save 2")
    deadline = time.monotonic() + 30
    while b.pending == 0:
        assert time.monotonic() < deadline, "B never read save 2"
        time.sleep(0.005)
    write(os.path.join(folder, "kernel.wgsl"), kernel(7.0))
    a.request_reload(ra.path)
    pump(a, lambda: ra.generation == 2, what="A applying save 3")
    assert run_scale(ra) == [7.0, 14.0, 21.0, 28.0]
    b.poll()  # the older read it held
    assert run_scale(ra) == [7.0, 14.0, 21.0, 28.0]
    assert run_scale(rb) == [7.0, 14.0, 21.0, 28.0]


def test_prefetch_resolves_usage_rows_against_the_schema_as_it_is_now(asset_root, make_library, tmp_path):
    # Rows a game recorded before the schema gained a parameter: prefetch looked up their keys
    # as recorded (without it) and warmed nothing the game then asks for, where bake
    # --variants-from re-resolves them (review helper 167).
    from asset_support import SCHEMA, make_asset

    from engine_plugin.bake import bake
    from engine_plugin.cache import read_usage

    lib = make_library(asset_root, record_usage=True)
    ref = lib.load("k.computeShader")
    for t in ("f32", "i32"):
        ref.program().variant({"T": t})
    lib.flush_usage()
    lib.close()
    usage = read_usage(str(tmp_path / "cache" / "usage.msgpack"))
    make_asset(asset_root, schema=SCHEMA + "  - { name: MODE, options: [fast, slow] }\n")
    report = bake([asset_root], str(tmp_path / "cache"), usage=usage, validate=False)
    assert report.totals["baked"] == 2, report.totals
    fresh = make_library(asset_root)
    got = fresh.prefetch()
    assert got.local == 2 and got.missed == 0 and got.failed == 0, got.as_dict()


def test_a_variant_kept_across_a_layout_reload_refuses_to_run_the_old_kernel(asset_root, make_library):
    # Review helper 186: a Variant taken before a layout reload ran the old kernel silently
    # (its params the old ones: the new schema's param was "unknown"). A body-only reload swaps
    # the new pipeline into it; a layout reload cannot, so it says what happened instead.
    import numpy as np

    from engine_plugin import abi
    from engine_plugin.errors import DispatchError

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    kept = ref.program().variant({"T": "f32"})
    x = np.array([1, 2, 3, 4], np.float32)
    assert abi.read(kept.run(4, inputs={"src": x}).outputs["dst"]).tolist() == [2.0, 4.0, 6.0, 8.0]
    write(os.path.join(ref.folder, "bindings.yaml"), SCHEMA_WITH_GAIN)
    write(os.path.join(ref.folder, "kernel.wgsl"), KERNEL_WITH_GAIN.replace("SCALE", "3.0"))
    lib.request_reload(ref.path)
    pump(lib, lambda: ref.generation == 1, what="the layout reload")
    for call in (lambda: kept.run(4, inputs={"src": x}), lambda: kept.run(4, inputs={"src": x}, params={"gain": 2.0})):
        with pytest.raises(DispatchError) as info:
            call()
        message = str(info.value)
        assert "bindings.yaml" in message and "layout" in message and "ref.program().variant" in message, message
    fresh = ref.program().variant({"T": "f32"})
    assert abi.read(fresh.run(4, inputs={"src": x}, params={"gain": 2.0}).outputs["dst"]).tolist() == [6.0, 12.0, 18.0, 24.0]


def test_a_kept_variant_is_refused_also_when_an_engine_product_pinned_the_program(asset_root, make_library):
    # Review helper 187: the first fix exempted every variant of a program anyone had pinned
    # (each engine product pins its program), so a script's kept Variant still ran the old
    # kernel. run() is refused whoever else holds the Variant; prepare() (what the engine
    # calls for the products it keeps) goes on.
    import numpy as np

    from engine_plugin.errors import DispatchError

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    pinned = ref.program().pinned()  # as an engine product registered on this asset does
    kept = ref.program().variant({"T": "f32"})
    assert pinned.variant({"T": "f32"}) is kept
    x = np.array([1, 2, 3, 4], np.float32)
    write(os.path.join(ref.folder, "bindings.yaml"), SCHEMA_WITH_GAIN)
    write(os.path.join(ref.folder, "kernel.wgsl"), KERNEL_WITH_GAIN.replace("SCALE", "3.0"))
    lib.request_reload(ref.path)
    pump(lib, lambda: ref.generation == 1, what="the layout reload")
    with pytest.raises(DispatchError, match="another binding layout"):
        kept.run(4, inputs={"src": x})
    results = kept.ctx.device.create_buffer(size=256, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    prepared = kept.prepare(4, inputs={"src": x}, results=results)  # the engine's path: not refused
    assert prepared is not None


def test_a_variant_kept_on_another_device_is_refused_after_a_reload(asset_root, make_library, gpu):
    # Review helper 187: copies made by Program.on_device are never swapped by a reload; one
    # kept ran the old kernel silently.
    import numpy as np

    from engine_plugin.device.context import get_context
    from engine_plugin.errors import DispatchError

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    ctx2 = get_context(get_context().adapter.request_device_sync())
    copy = ref.program().on_device(ctx2)
    kept = copy.variant({"T": "f32"})
    x = np.array([1, 2, 3, 4], np.float32)
    write(os.path.join(ref.folder, "kernel.wgsl"), kernel(5.0))  # body-only on the main device
    lib.request_reload(ref.path)
    pump(lib, lambda: ref.generation == 1, what="the reload")
    with pytest.raises(DispatchError, match="on another device"):
        kept.run(4, inputs={"src": x})
    fresh = ref.program().on_device(ctx2).variant({"T": "f32"})
    from engine_plugin import abi

    assert abi.read(fresh.run(4, inputs={"src": x}).outputs["dst"]).tolist() == [5.0, 10.0, 15.0, 20.0]
    # The copy held across the reload makes the new kernel's variants (helper 192: an i32 one
    # made after the reload ran the old kernel's numbers).
    xi = np.array([1, 2, 3, 4], np.int32)
    assert abi.read(copy.variant({"T": "i32"}).run(4, inputs={"src": xi}).outputs["dst"]).tolist() == [5, 10, 15, 20]


def test_an_edit_dropping_an_option_a_variant_in_use_needs_says_so(asset_root, make_library):
    # Review helper 186: the reload is refused (the variant in use would have no successor),
    # but the message read as if the edit had asked for the value ("T='i32' is not an option").
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref, T="i32") == [2, 4, 6, 8]
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    _save(lib, ref, ref.folder, "bindings.yaml", SCHEMA.replace("options: [f32, i32, u32]", "options: [f32]"))
    pump(lib, lambda: ref.diagnostics is not None, what="the diagnostics")
    first = ref.diagnostics.splitlines()[0]
    assert "bindings.yaml" in first and "'i32' is not an option" in first, ref.diagnostics
    assert "uses the variant T=i32" in ref.diagnostics and "keep that option" in ref.diagnostics, ref.diagnostics
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]  # the last good program still runs


@pytest.mark.parametrize("asked", [{"T": "f32"}, None], ids=["asked-for-f32", "defaulted"])
def test_a_save_changing_only_a_default_carries_values_asked_for_and_moves_defaulted_ones(asset_root, make_library, tmp_path, asked):
    # Review helper 229: a value asked for that equals the old default was taken for a default,
    # so a save changing only "default: f32" to "default: i32" retired the Variant the game
    # held ({"T": "f32"}, still offered, its layout unchanged) and compiled an unrequested i32
    # eagerly, into the usage log. A variant that took the default follows the new one.
    import numpy as np

    from engine_plugin import abi
    from engine_plugin.cache import read_usage

    schema = SCHEMA.replace("options: [f32, i32, u32] }", "options: [f32, i32, u32], default: f32 }")
    folder = os.path.join(asset_root, "k.computeShader")
    write(os.path.join(folder, "bindings.yaml"), schema)
    lib = make_library(asset_root, record_usage=True)
    ref = lib.load("k.computeShader")
    held = ref.program().variant(asked)
    x = np.array([1, 2, 3, 4], np.float32)
    assert abi.read(held.run(4, inputs={"src": x}).outputs["dst"]).tolist() == [2.0, 4.0, 6.0, 8.0]
    write(os.path.join(folder, "bindings.yaml"), schema.replace("default: f32", "default: i32"))
    lib.request_reload(ref.path)
    results = pump(lib, lambda: ref.generation == 1, what="the reload")
    lib.flush_usage()
    used = [s.label() for s in read_usage(str(tmp_path / "cache" / "usage.msgpack")).get("k.computeShader", [])]
    if asked:
        assert [s.label() for s in ref.program().variants] == ["T=f32"]
        assert results[0].body_only and results[0].layout_changed == (), results[0].describe()
        assert abi.read(held.run(4, inputs={"src": x}).outputs["dst"]).tolist() == [2.0, 4.0, 6.0, 8.0]
        assert used == ["T=f32"], used
        # Carried again by the next reload: still the variant asked for.
        write(os.path.join(folder, "kernel.wgsl"), kernel(3.0))
        lib.request_reload(ref.path)
        pump(lib, lambda: ref.generation == 2, what="the next reload")
        assert [s.label() for s in ref.program().variants] == ["T=f32"]
        assert abi.read(held.run(4, inputs={"src": x}).outputs["dst"]).tolist() == [3.0, 6.0, 9.0, 12.0]
    else:
        assert [s.label() for s in ref.program().variants] == ["T=i32"]
        assert not results[0].body_only
