"""Hot reload follows what a read brings in and names the files it reads (review helper 97):
an edit to a file an asset just started reading (a link's new target) before the reload is
applied; a link in the middle of a chain retargeted; errors after a body is renamed or after a
failed read name the files the live program reads."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from asset_support import SCHEMA, kernel, pump, run_scale, settle, wait_watching, write

from engine_plugin.errors import AssetError
from engine_plugin.lowering import resolve_spec

pytestmark = pytest.mark.gpu


def _swap_link(target: str, link: str) -> None:
    os.symlink(target, link + ".new")
    os.replace(link + ".new", link)  # an atomic retarget


def _old(*paths: str) -> None:
    old = time.time() - 10  # settled files: no quiet window to wait for
    for p in paths:
        os.utime(p, (old, old))


def test_an_edit_to_a_links_new_target_before_the_reload_is_applied_is_not_lost(tmp_path, make_library):
    root = str(tmp_path / "assets")
    os.makedirs(f"{root}/bodies")
    write(f"{root}/bodies/t1.wgsl", kernel(2.0))
    write(f"{root}/bodies/t2.wgsl", kernel(5.0))
    os.makedirs(f"{root}/k.computeShader")
    write(f"{root}/k.computeShader/bindings.yaml", SCHEMA)
    os.symlink("../bodies/t1.wgsl", f"{root}/k.computeShader/kernel.wgsl")
    _old(f"{root}/bodies/t1.wgsl", f"{root}/bodies/t2.wgsl", f"{root}/k.computeShader/bindings.yaml")
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    lib.watch()
    wait_watching(lib, root)
    _swap_link("../bodies/t2.wgsl", f"{root}/k.computeShader/kernel.wgsl")
    deadline = time.monotonic() + 10
    while lib.pending == 0 and time.monotonic() < deadline:  # read, not applied: the game's frame runs
        time.sleep(0.005)
    assert lib.pending
    write(f"{root}/bodies/t2.wgsl", kernel(7.0))  # the file the asset reads now, edited meanwhile
    time.sleep(0.3)  # its event arrives before the next poll
    pump(lib, lambda: run_scale(ref) == [7.0, 14.0, 21.0, 28.0], what="the edit of the new target")
    settle(lib, 0.3)
    assert run_scale(ref) == [7.0, 14.0, 21.0, 28.0] and ref.error is None


def _body_chain(root: str) -> None:
    os.makedirs(f"{root}/bodies")
    write(f"{root}/bodies/v1.wgsl", kernel(2.0))
    write(f"{root}/bodies/v2.wgsl", kernel(5.0))
    os.symlink("v1.wgsl", f"{root}/bodies/current.wgsl")
    os.makedirs(f"{root}/k.computeShader")
    write(f"{root}/k.computeShader/bindings.yaml", SCHEMA)
    os.symlink("../bodies/current.wgsl", f"{root}/k.computeShader/kernel.wgsl")
    _old(f"{root}/bodies/v1.wgsl", f"{root}/bodies/v2.wgsl", f"{root}/k.computeShader/bindings.yaml")


def _folder_chain(root: str) -> None:
    for v, scale in (("v1", 2.0), ("v2", 5.0)):
        os.makedirs(f"{root}/versions/{v}")
        write(f"{root}/versions/{v}/bindings.yaml", SCHEMA)
        write(f"{root}/versions/{v}/kernel.wgsl", kernel(scale))
        _old(f"{root}/versions/{v}/bindings.yaml", f"{root}/versions/{v}/kernel.wgsl")
    os.symlink("v1", f"{root}/versions/current")
    os.symlink("versions/current", f"{root}/k.computeShader")


def _through_linked_folder(root: str) -> None:
    for v, scale in (("sharedv1", 2.0), ("sharedv2", 5.0)):
        os.makedirs(f"{root}/{v}")
        write(f"{root}/{v}/k.wgsl", kernel(scale))
        _old(f"{root}/{v}/k.wgsl")
    os.symlink("sharedv1", f"{root}/shared")
    os.makedirs(f"{root}/k.computeShader")
    write(f"{root}/k.computeShader/bindings.yaml", SCHEMA)
    _old(f"{root}/k.computeShader/bindings.yaml")
    os.symlink("../shared/k.wgsl", f"{root}/k.computeShader/kernel.wgsl")


@pytest.mark.parametrize(
    "build, retarget",
    [
        (_body_chain, lambda r: _swap_link("v2.wgsl", f"{r}/bodies/current.wgsl")),
        (_folder_chain, lambda r: _swap_link("v2", f"{r}/versions/current")),
        (_through_linked_folder, lambda r: _swap_link("sharedv2", f"{r}/shared")),
    ],
    ids=["body-link-to-link", "folder-link-to-link", "body-link-through-linked-folder"],
)
def test_a_link_in_the_middle_of_a_chain_retargeted_reloads(tmp_path, make_library, build, retarget):
    root = str(tmp_path / "assets")
    os.makedirs(root)
    build(root)
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    lib.watch()
    wait_watching(lib, root)
    retarget(root)
    pump(lib, lambda: ref.generation >= 1, what="the reload of the retargeted chain")
    assert run_scale(ref) == [5.0, 10.0, 15.0, 20.0] and ref.error is None


INT_ERROR_BODY = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, sqrt(src_get(i)));
}
"""


def test_after_a_body_is_renamed_a_variants_error_names_the_new_file(tmp_path, make_library):
    root = str(tmp_path / "assets")
    folder = f"{root}/k.computeShader"
    os.makedirs(folder)
    write(f"{folder}/bindings.yaml", SCHEMA)
    write(f"{folder}/kernel.wgsl", INT_ERROR_BODY)
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    ref.program().variant({"T": "f32"})
    with pytest.raises(Exception, match="kernel.wgsl"):
        ref.program().variant({"T": "i32"})  # sqrt of an i32: the body's error, at its line
    lib.watch()
    wait_watching(lib, folder)
    os.rename(f"{folder}/kernel.wgsl", f"{folder}/main.wgsl")
    pump(lib, lambda: os.path.basename(ref.source.wgsl_path) == "main.wgsl", what="the renamed body read")
    settle(lib, 0.3)
    with pytest.raises(Exception) as caught:
        ref.program().variant({"T": "i32"})
    assert "main.wgsl:5:" in str(caught.value) and "kernel.wgsl" not in str(caught.value), caught.value


MODULE = "// shared\nfn shared_root(x: f32) -> f32 {\n    return sqrt(x);\n}\nfn shared_bad_for_ints(x: T) -> T {\n    return sqrt(x);\n}\n"
IMPORTER = """#import factor

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, shared_bad_for_ints(src_get(i)));
}
"""


def test_a_failed_read_leaves_later_errors_naming_the_files_the_live_program_reads(tmp_path, make_library):
    root = str(tmp_path / "assets")
    os.makedirs(f"{root}/modules")
    write(f"{root}/modules/factor.wgsl", MODULE)
    os.makedirs(f"{root}/sub/n.computeShader")
    write(f"{root}/sub/n.computeShader/bindings.yaml", SCHEMA)
    write(f"{root}/sub/n.computeShader/kernel.wgsl", IMPORTER)
    with pytest.raises(Exception):
        make_library(root).load("sub/n.computeShader").program().variant({"T": "i32"})  # cached by a first run
    lib = make_library(root)
    ref = lib.load("sub/n.computeShader")
    ref.program().variant({"T": "f32"})
    lib.watch()
    wait_watching(lib, root)
    os.makedirs(f"{root}/sub/modules")
    write(f"{root}/sub/modules/factor.wgsl", "fn oops( {\n")  # a broken module made nearer: the read fails
    pump(lib, lambda: ref.error is not None, what="the failed read")
    shutil.rmtree(f"{root}/sub/modules")  # and gone again: the live content is what the disk says
    pump(lib, lambda: ref.error is None, what="the error cleared")
    settle(lib, 0.3)
    with pytest.raises(Exception) as caught:
        ref.program().variant({"T": "i32"})
    text = str(caught.value)
    assert os.path.join("modules", "factor.wgsl") in text and os.path.join("sub", "modules") not in text, text


def test_a_relative_root_keeps_naming_the_same_assets_after_the_game_changes_directory(tmp_path, make_library, monkeypatch):
    # Review helper 97: the watcher followed the absolute root, the reload read the relative one
    # from the new working directory: another tree's asset went live, silently.
    for where, scale in (("game", 2.0), ("elsewhere", 9.0)):
        folder = tmp_path / where / "assets" / "k.computeShader"
        os.makedirs(folder)
        write(str(folder / "bindings.yaml"), SCHEMA)
        write(str(folder / "kernel.wgsl"), kernel(scale))
    monkeypatch.chdir(tmp_path / "game")
    lib = make_library("assets")
    ref = lib.load("k.computeShader")
    lib.watch()
    wait_watching(lib, str(tmp_path / "game" / "assets"))
    monkeypatch.chdir(tmp_path / "elsewhere")
    write(str(tmp_path / "game" / "assets" / "k.computeShader" / "kernel.wgsl"), kernel(5.0))
    pump(lib, lambda: ref.generation >= 1 or ref.error is not None, what="the reload")
    assert ref.error is None and run_scale(ref) == [5.0, 10.0, 15.0, 20.0]


def test_a_link_whose_target_goes_through_a_link_then_up_follows_that_link(tmp_path, make_library):
    # Review helper 100: "../cur/../body.wgsl" with cur a link was collapsed as text to
    # "../body.wgsl": the path through `cur` was never followed, and its retarget reloaded nothing.
    root = str(tmp_path / "assets")
    for v, scale in (("va", 2.0), ("vb", 5.0)):
        os.makedirs(f"{root}/versions/{v}/inner")
        write(f"{root}/versions/{v}/body.wgsl", kernel(scale))
        _old(f"{root}/versions/{v}/body.wgsl")
    os.symlink("versions/va/inner", f"{root}/cur")
    os.makedirs(f"{root}/k.computeShader")
    write(f"{root}/k.computeShader/bindings.yaml", SCHEMA)
    _old(f"{root}/k.computeShader/bindings.yaml")
    os.symlink("../cur/../body.wgsl", f"{root}/k.computeShader/kernel.wgsl")  # versions/va/body.wgsl
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    lib.watch()
    wait_watching(lib, root)
    _swap_link("versions/vb/inner", f"{root}/cur")
    pump(lib, lambda: ref.generation >= 1, what="the reload through the retargeted link")
    assert run_scale(ref) == [5.0, 10.0, 15.0, 20.0] and ref.error is None


def test_a_broken_save_that_brings_in_a_new_import_is_reported_once(tmp_path, make_library):
    # Review helper 100: the read once more (for the new import) failed again against the live
    # content and was reported a second time: two ReloadFailures, ref.failures == 2.
    root = str(tmp_path / "assets")
    os.makedirs(f"{root}/modules")
    write(f"{root}/modules/factor.wgsl", "fn shared_factor() -> f32 { return 2.0; }\n")
    folder = f"{root}/k.computeShader"
    os.makedirs(folder)
    write(f"{folder}/bindings.yaml", SCHEMA)
    write(f"{folder}/kernel.wgsl", kernel(2.0))
    _old(f"{root}/modules/factor.wgsl", f"{folder}/bindings.yaml", f"{folder}/kernel.wgsl")
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    heard: list = []
    ref.on_error(heard.append)
    lib.watch()
    wait_watching(lib, folder)
    write(f"{folder}/kernel.wgsl", "#import factor\n" + kernel(2.0).replace("dst_set", "let oops = ;\n    dst_set"))
    results = pump(lib, lambda: ref.error is not None, what="the failed reload")
    results += settle(lib, 1.0)
    assert [type(r).__name__ for r in results] == ["ReloadFailure"] and ref.failures == 1 and len(heard) == 1, results


def test_relative_module_folders_keep_naming_the_same_modules_after_the_game_changes_directory(tmp_path, make_library, monkeypatch):
    # Review helper 100: the root was made absolute, the extra module folders were not.
    for where, factor in (("game", 1.0), ("elsewhere", 100.0)):
        os.makedirs(tmp_path / where / "shared")
        write(str(tmp_path / where / "shared" / "factor.wgsl"), f"fn shared_factor() -> f32 {{ return {factor}; }}\n")
    folder = tmp_path / "game" / "assets" / "k.computeShader"
    os.makedirs(folder)
    write(str(folder / "bindings.yaml"), SCHEMA)

    def body(scale: float) -> str:
        return "#import factor\n" + kernel(scale).replace(f"T({scale!r})", f"T({scale!r} * shared_factor())")

    write(str(folder / "kernel.wgsl"), body(2.0))
    monkeypatch.chdir(tmp_path / "game")
    lib = make_library("assets", modules=["shared"])
    ref = lib.load("k.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    lib.watch()
    wait_watching(lib, str(folder))
    monkeypatch.chdir(tmp_path / "elsewhere")
    write(str(folder / "kernel.wgsl"), body(3.0))
    pump(lib, lambda: ref.generation >= 1 or ref.error is not None, what="the reload")
    assert ref.error is None and run_scale(ref) == [3.0, 6.0, 9.0, 12.0]


def test_a_link_chain_that_leaves_the_root_and_comes_back_is_refused_naming_the_outside_link(tmp_path, make_library):
    # Review helper 100: kernel.wgsl -> /outside/hop.wgsl -> root/bodies/v1.wgsl was read (its
    # file is inside the root) but the watcher follows the root only: retargeting the outside
    # hop left the old kernel live, silently. Every link on the way must lie inside the root.
    root = str(tmp_path / "assets")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.makedirs(f"{root}/bodies")
    write(f"{root}/bodies/v1.wgsl", kernel(2.0))
    os.makedirs(f"{root}/k.computeShader")
    write(f"{root}/k.computeShader/bindings.yaml", SCHEMA)
    os.symlink(f"{root}/bodies/v1.wgsl", str(outside / "hop.wgsl"))
    os.symlink(str(outside / "hop.wgsl"), f"{root}/k.computeShader/kernel.wgsl")
    lib = make_library(root)
    with pytest.raises(AssetError, match="hop.wgsl, outside the asset root") as caught:
        lib.load("k.computeShader")
    assert "kernel.wgsl" in str(caught.value)
    os.remove(f"{root}/k.computeShader/kernel.wgsl")
    os.symlink("../bodies/v1.wgsl", f"{root}/k.computeShader/kernel.wgsl")  # a chain inside the root is read
    assert run_scale(make_library(root).load("k.computeShader")) == [2.0, 4.0, 6.0, 8.0]


def _read_broken_renamed_save(lib, folder: str) -> None:
    """The body renamed to zzz.wgsl and broken; the worker's read of it waits for poll()."""
    os.rename(f"{folder}/kernel.wgsl", f"{folder}/zzz.wgsl")
    write(f"{folder}/zzz.wgsl", "garbage(\n")
    lib.request_reload("k.computeShader")
    deadline = time.monotonic() + 10
    while lib.pending == 0 and time.monotonic() < deadline:  # read, not applied: the game's frame runs
        time.sleep(0.005)
    assert lib.pending, "the worker never prepared the read"


def test_while_a_broken_renamed_save_waits_for_poll_the_live_programs_errors_name_its_own_file(tmp_path, make_library):
    # The worker pointed the store the live program shares at the files it read: until the
    # next poll(), the live program's errors named zzz.wgsl, a file it never read and whose
    # save was refused (review helper 224).
    root = str(tmp_path / "assets")
    folder = f"{root}/k.computeShader"
    os.makedirs(folder)
    write(f"{folder}/bindings.yaml", SCHEMA)
    write(f"{folder}/kernel.wgsl", INT_ERROR_BODY)
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    ref.program().variant({"T": "f32"})
    with pytest.raises(Exception, match="kernel.wgsl:5:"):
        ref.program().variant({"T": "i32"})
    _read_broken_renamed_save(lib, folder)
    with pytest.raises(Exception) as caught:
        ref.program().variant({"T": "i32"})
    assert "kernel.wgsl:5:" in str(caught.value) and "zzz.wgsl" not in str(caught.value), caught.value
    pump(lib, lambda: ref.error is not None, what="the broken save reported")
    assert "zzz.wgsl" in str(ref.error)  # the refused read's own error names the file it read


def test_while_a_broken_renamed_save_waits_for_poll_the_live_programs_lowerings_name_its_files(tmp_path, make_library):
    # The same for a cache hit of the live program (the memory tier here): rebased onto the
    # pending read's files. Once a good save of the renamed body is applied, they name it.
    root = str(tmp_path / "assets")
    folder = f"{root}/k.computeShader"
    os.makedirs(folder)
    write(f"{folder}/bindings.yaml", SCHEMA)
    write(f"{folder}/kernel.wgsl", kernel(2.0))
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    live_wgsl = ref.source.wgsl_path
    i32 = resolve_spec(ref.program().schema, {"T": "i32"})
    assert ref.program().lowered(i32).asset == live_wgsl
    _read_broken_renamed_save(lib, folder)
    during = ref.program().lowered(i32)
    assert (during.asset, during.source_map.files[1]) == (live_wgsl, live_wgsl)
    write(f"{folder}/zzz.wgsl", kernel(3.0))
    lib.request_reload("k.computeShader")
    pump(lib, lambda: ref.generation == 1, what="the good save of the renamed body applied")
    after = ref.program().lowered(i32)
    assert after.asset == ref.source.wgsl_path and os.path.basename(after.source_map.files[1]) == "zzz.wgsl"
    assert run_scale(ref) == [3.0, 6.0, 9.0, 12.0]
