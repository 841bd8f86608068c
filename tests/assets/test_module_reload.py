"""Hot reload follows shared modules: editing ``modules/NAME.wgsl`` reloads every loaded asset
that imports it (directly or through another module), body-only when the plan is unchanged;
a broken module keeps each importer's last good program and names the module's own line."""

from __future__ import annotations

import os

import pytest
from asset_support import SCHEMA, pump, run_scale, settle, wait_watching, write

pytestmark = pytest.mark.gpu

# Two assets scale by a factor from a shared module; one imports it directly, the other
# through a second module (a transitive import).
FACTOR = "// the shared factor\nfn shared_factor() -> f32 {\n    return FACTOR;\n}\n"
VIA = "#import factor\n\nfn via_factor() -> f32 {\n    return shared_factor();\n}\n"
BODY = """#import {module}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = zero_index(gid);
    if (i >= zero_n()) {{ return; }}
    dst_set(i, src_get(i) * T({call}()));
}}
"""


def _factor(value: str) -> str:
    return FACTOR.replace("FACTOR", value)


def _importers(root: str, factor: str = "2.0") -> None:
    modules = os.path.join(root, "modules")
    os.makedirs(modules, exist_ok=True)
    write(os.path.join(modules, "factor.wgsl"), _factor(factor))
    write(os.path.join(modules, "via.wgsl"), VIA)
    for name, module, call in (("direct", "factor", "shared_factor"), ("indirect", "via", "via_factor")):
        folder = os.path.join(root, f"{name}.computeShader")
        os.makedirs(folder, exist_ok=True)
        write(os.path.join(folder, "bindings.yaml"), SCHEMA)
        write(os.path.join(folder, "kernel.wgsl"), BODY.format(module=module, call=call))


def _near_importer(root: str, make_library):
    """``sub/near.computeShader`` importing ``factor`` (the library, and its reference, running 2.0)."""
    sub = os.path.join(root, "sub", "near.computeShader")
    os.makedirs(sub)
    write(os.path.join(sub, "bindings.yaml"), SCHEMA)
    write(os.path.join(sub, "kernel.wgsl"), BODY.format(module="factor", call="shared_factor"))
    lib = make_library(root)
    near = lib.load("sub/near.computeShader")
    assert run_scale(near) == [2.0, 4.0, 6.0, 8.0]
    return lib, near


def test_a_module_edit_hot_reloads_both_importers_body_only(asset_root, make_library):
    _importers(asset_root)
    lib = make_library(asset_root)
    direct, indirect = lib.load("direct.computeShader"), lib.load("indirect.computeShader")
    other = lib.load("k.computeShader")  # imports nothing: never reloaded by a module edit
    assert run_scale(direct) == run_scale(indirect) == [2.0, 4.0, 6.0, 8.0]
    run_scale(other)
    in_use = {ref.path: ref.program().variants[next(iter(ref.program().variants))] for ref in (direct, indirect)}
    lib.watch()
    wait_watching(lib, os.path.join(asset_root, "modules"))

    write(os.path.join(asset_root, "modules", "factor.wgsl"), _factor("3.0"))  # a real save, seen by the observer
    results = pump(lib, lambda: direct.generation == 1 and indirect.generation == 1, what="both importers to reload")
    results += settle(lib, 0.2)
    events = {r.asset: r for r in results}
    assert set(events) == {"direct.computeShader", "indirect.computeShader"}, [r.describe() for r in results]
    for ev in events.values():
        assert ev.ok and ev.body_only and ev.layout_changed == ()
        assert os.path.join("modules", "factor.wgsl") in ev.files
    assert other.generation == 0
    assert run_scale(direct) == run_scale(indirect) == [3.0, 6.0, 9.0, 12.0]
    for ref in (direct, indirect):  # body-only: the Variant objects (buffers, bind groups) carried over
        assert in_use[ref.path] in ref.program().variants.values()


def test_a_broken_module_keeps_the_importers_running_and_names_the_module_line(asset_root, make_library):
    _importers(asset_root)
    lib = make_library(asset_root)
    direct, indirect = lib.load("direct.computeShader"), lib.load("indirect.computeShader")
    run_scale(direct), run_scale(indirect)
    module = os.path.join(asset_root, "modules", "factor.wgsl")
    lib.service.start_worker()  # file events without an observer: notify_path is what it calls

    write(module, _factor("3.0 * undefined_thing"))
    assert lib.service.notify_path(module)  # the path a file event takes, without an observer
    pump(lib, lambda: direct.diagnostics is not None and indirect.diagnostics is not None, what="both diagnostics")
    for ref in (direct, indirect):
        first = ref.diagnostics.splitlines()[0]
        assert first.startswith(module + ":3:18:"), ref.diagnostics
        assert "undefined_thing" in ref.diagnostics and "^" in ref.diagnostics
        assert ref.generation == 0
        assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]  # the last good program still runs

    write(module, _factor("4.0"))
    assert lib.service.notify_path(module)
    pump(lib, lambda: direct.generation == 1 and indirect.generation == 1, what="the fix")
    assert direct.diagnostics is None and indirect.diagnostics is None
    assert run_scale(direct) == run_scale(indirect) == [4.0, 8.0, 12.0, 16.0]


def test_an_import_of_a_missing_module_fails_until_the_module_arrives(asset_root, make_library):
    _importers(asset_root)
    lib = make_library(asset_root)
    direct = lib.load("direct.computeShader")
    run_scale(direct)
    kernel = os.path.join(direct.folder, "kernel.wgsl")
    write(kernel, BODY.format(module="extra", call="extra_factor"))
    lib.request_reload(direct.path)
    pump(lib, lambda: direct.diagnostics is not None, what="the unknown-module error")
    first = direct.diagnostics.splitlines()[0]
    assert first.startswith(kernel + ":1:9: '#import extra': no module extra.wgsl (searched: "), direct.diagnostics
    assert os.path.join(asset_root, "modules") in first
    assert run_scale(direct) == [2.0, 4.0, 6.0, 8.0]

    extra = os.path.join(asset_root, "modules", "extra.wgsl")
    write(extra, "fn extra_factor() -> f32 {\n    return 5.0;\n}\n")
    assert lib.service.notify_path(extra)  # a failing importer retries when a module appears
    pump(lib, lambda: direct.generation == 1, what="the reload once the module exists")
    assert run_scale(direct) == [5.0, 10.0, 15.0, 20.0]


def test_a_module_arriving_nearer_than_the_imported_one_reloads_its_importer(asset_root, make_library):
    # Review helper 80: #import takes the nearest modules/ folder, but a module created nearer
    # than the one the live program imported was ignored: the program kept the far module's
    # numbers, and the next unrelated save switched them silently.
    _importers(asset_root)  # modules/factor.wgsl: 2.0
    lib, near = _near_importer(asset_root, make_library)
    lib.watch()
    wait_watching(lib, os.path.join(asset_root, "sub"))
    os.makedirs(os.path.join(asset_root, "sub", "modules"))
    write(os.path.join(asset_root, "sub", "modules", "factor.wgsl"), _factor("5.0"))
    pump(lib, lambda: near.generation == 1, what="the importer to reload")
    assert run_scale(near) == [5.0, 10.0, 15.0, 20.0]
    os.remove(os.path.join(asset_root, "sub", "modules", "factor.wgsl"))  # gone: the far one again
    pump(lib, lambda: near.generation == 2, what="the importer to reload again")
    assert run_scale(near) == [2.0, 4.0, 6.0, 8.0]


def test_a_linked_asset_reloads_when_the_file_it_links_to_is_saved(asset_root, make_library):
    # Review helper 80: events name the link's target, so an asset folder linked to another
    # (or an asset whose files are links) kept the old kernel with no diagnostics.
    from asset_support import kernel

    os.symlink("k.computeShader", os.path.join(asset_root, "alias.computeShader"))
    linked = os.path.join(asset_root, "f.computeShader")
    os.makedirs(linked)
    for name in ("kernel.wgsl", "bindings.yaml"):
        os.symlink(os.path.join("..", "k.computeShader", name), os.path.join(linked, name))
    lib = make_library(asset_root)
    refs = [lib.load(n) for n in ("k.computeShader", "alias.computeShader", "f.computeShader")]
    assert [run_scale(r) for r in refs] == [[2.0, 4.0, 6.0, 8.0]] * 3
    lib.watch()
    wait_watching(lib, os.path.join(asset_root, "k.computeShader"))
    write(os.path.join(asset_root, "k.computeShader", "kernel.wgsl"), kernel(3.0))
    pump(lib, lambda: all(r.generation == 1 for r in refs), what="all three to reload")
    assert [run_scale(r) for r in refs] == [[3.0, 6.0, 9.0, 12.0]] * 3


def test_a_module_arriving_through_a_linked_modules_folder_reloads_its_importer(asset_root, make_library):
    # Review helper 85: sub/modules links to ../shared; the event names shared/factor.wgsl, so
    # the shadowing module was never noticed.
    _importers(asset_root)
    os.makedirs(os.path.join(asset_root, "shared"))
    sub = os.path.join(asset_root, "sub", "near.computeShader")
    os.makedirs(sub)
    os.symlink(os.path.join("..", "shared"), os.path.join(asset_root, "sub", "modules"))
    write(os.path.join(sub, "bindings.yaml"), SCHEMA)
    write(os.path.join(sub, "kernel.wgsl"), BODY.format(module="factor", call="shared_factor"))
    lib = make_library(asset_root)
    near = lib.load("sub/near.computeShader")
    assert run_scale(near) == [2.0, 4.0, 6.0, 8.0]
    lib.watch()
    wait_watching(lib, os.path.join(asset_root, "shared"))
    write(os.path.join(asset_root, "shared", "factor.wgsl"), _factor("5.0"))
    pump(lib, lambda: near.generation == 1, what="the importer to reload")
    assert run_scale(near) == [5.0, 10.0, 15.0, 20.0]


def test_a_link_retargeted_to_the_same_content_follows_its_new_target(asset_root, make_library):
    # Review helper 85: the retarget read as unchanged and the asset kept following the old
    # target: a later save of the new one was never seen.
    from asset_support import kernel

    copy = os.path.join(asset_root, "m.computeShader")
    os.makedirs(copy)
    for name in ("bindings.yaml", "kernel.wgsl"):
        with open(os.path.join(asset_root, "k.computeShader", name)) as f:
            write(os.path.join(copy, name), f.read())
    link = os.path.join(asset_root, "alias.computeShader")
    os.symlink("k.computeShader", link)
    lib = make_library(asset_root)
    alias = lib.load("alias.computeShader")
    assert run_scale(alias) == [2.0, 4.0, 6.0, 8.0]
    lib.watch()
    wait_watching(lib, copy)
    os.symlink("m.computeShader", link + ".tmp")
    os.replace(link + ".tmp", link)  # retargeted, as ln -sfn does
    settle(lib, 0.3)
    assert alias.generation == 0  # the same content: no reload
    write(os.path.join(copy, "kernel.wgsl"), kernel(3.0))
    pump(lib, lambda: alias.generation == 1, what="the alias to follow its new target")
    assert run_scale(alias) == [3.0, 6.0, 9.0, 12.0]


def test_a_modules_folder_made_as_a_link_reloads_its_importer(asset_root, make_library):
    # Review helper 90: a link made (or retargeted) where imports look is one file event for
    # the link, nothing for what lies behind it: the asset kept the far module's numbers.
    _importers(asset_root)  # modules/factor.wgsl: 2.0
    os.makedirs(os.path.join(asset_root, "common"))
    write(os.path.join(asset_root, "common", "factor.wgsl"), _factor("7.0"))
    lib, near = _near_importer(asset_root, make_library)
    lib.watch()
    wait_watching(lib, os.path.join(asset_root, "sub"))
    os.symlink(os.path.join("..", "common"), os.path.join(asset_root, "sub", "modules"))
    pump(lib, lambda: near.generation == 1, what="the importer to reload")
    assert run_scale(near) == [7.0, 14.0, 21.0, 28.0]


def test_a_fix_to_a_file_only_a_failed_read_used_reloads(asset_root, make_library):
    # Review helper 90: kernel.wgsl retargeted to a broken file, then that file fixed: the
    # index held only the last good read's files, so the fix was never seen.
    from asset_support import kernel

    src = os.path.join(asset_root, "src")
    os.makedirs(src)
    write(os.path.join(src, "k1.wgsl"), kernel(2.0))
    write(os.path.join(src, "k2.wgsl"), kernel("broken_here"))
    body = os.path.join(asset_root, "k.computeShader", "kernel.wgsl")
    os.remove(body)
    os.symlink(os.path.join("..", "src", "k1.wgsl"), body)
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    lib.watch()
    wait_watching(lib, src)
    os.symlink(os.path.join("..", "src", "k2.wgsl"), body + ".tmp")
    os.replace(body + ".tmp", body)
    pump(lib, lambda: ref.diagnostics is not None, what="the broken body's diagnostics")
    write(os.path.join(src, "k2.wgsl"), kernel(3.0))
    pump(lib, lambda: ref.generation == 1, what="the fix to reload")
    assert ref.diagnostics is None and run_scale(ref) == [3.0, 6.0, 9.0, 12.0]


def test_an_asset_that_failed_at_load_reloads_when_the_file_its_link_names_is_fixed(asset_root, make_library):
    # Review helper 90: a failed first read entered no files in the index.
    schemas = os.path.join(asset_root, "schemas")
    os.makedirs(schemas)
    write(os.path.join(schemas, "s.yaml"), SCHEMA + "bake: [ {\n")  # broken YAML
    yaml_path = os.path.join(asset_root, "k.computeShader", "bindings.yaml")
    os.remove(yaml_path)
    os.symlink(os.path.join("..", "schemas", "s.yaml"), yaml_path)
    lib = make_library(asset_root)
    ref = lib.load("k.computeShader", strict=False)
    assert ref.error is not None
    lib.watch()
    wait_watching(lib, schemas)
    write(os.path.join(schemas, "s.yaml"), SCHEMA)
    pump(lib, lambda: ref.error is None and ref.generation == 1, what="the fixed schema to load")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]


def test_an_error_handling_a_file_event_never_stops_the_watch(asset_root, make_library, caplog):
    # Review helper 90: an exception out of the handler ended watchdog's dispatcher thread, and
    # every later save was ignored with the watch still reading as on.
    from engine_plugin.assets.watcher import _Handler

    lib = make_library(asset_root)
    lib.load("k.computeShader")

    class Event:
        event_type, is_directory, src_path = "modified", False, os.path.join(asset_root, "k.computeShader", "kernel.wgsl")

    def broken(path):
        raise RuntimeError("dictionary keys changed during iteration")

    lib.service.notify_path = broken
    _Handler(lib.service).dispatch(Event())  # logged, not raised
    assert any("handling the file event" in m for m in caplog.messages)
