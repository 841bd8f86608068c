"""Hostile assets a review helper found (issue 15's ninth pass): each once crashed, hung or
broke the library; each must now be a PluginError naming the user's file, or just work."""

from __future__ import annotations

import os
import time

import pytest
from asset_support import make_asset, pump, wait_watching, write

from engine_plugin import abi
from engine_plugin.bake import bake
from engine_plugin.errors import AssetError, LoweringError, PluginError, SchemaError
from engine_plugin.lowering import lower, parse

SIMPLE_YAML = 'bindings:\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\n'


def simple_asset(root: str, name: str, body: str, yaml: str = SIMPLE_YAML) -> str:
    """An asset folder ``name.computeShader`` under ``root`` (made as needed); answers it."""
    folder = os.path.join(root, f"{name}.computeShader")
    os.makedirs(folder, exist_ok=True)
    write(os.path.join(folder, "bindings.yaml"), yaml)
    write(os.path.join(folder, "kernel.wgsl"), body)
    return folder


def simple_body(expr: str) -> str:
    return (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        f"    let i = zero_index(gid);\n    if (i >= zero_n()) {{ return; }}\n    dst_set(i, {expr});\n}}\n"
    )


def test_an_operator_chain_naga_would_overflow_its_stack_on_is_a_lowering_error_at_its_line():
    # 20,000 terms killed the process (SIGSEGV inside create_shader_module), in a hot reload too.
    with pytest.raises(LoweringError) as info:
        lower(parse(SIMPLE_YAML, "k/bindings.yaml"), simple_body("1.0 + " * 20000 + "1.0"), {}, wgsl_path="k/kernel.wgsl")
    assert info.value.span.path == "k/kernel.wgsl" and info.value.span.line == 5
    assert "too deep" in str(info.value)
    # A long chain split by commas or statements is fine; so is one well under the bound.
    lower(parse(SIMPLE_YAML, "k/bindings.yaml"), simple_body("1.0 + " * 1000 + "1.0"), {}, wgsl_path="k/kernel.wgsl")


@pytest.mark.parametrize(
    "expr",
    [
        "(" * 5000 + "1.0" + ")" * 5000,  # nesting (review helper 29: each of these killed the process)
        "abs(" * 20000 + "1.0" + ")" * 20000,
        "- " * 20000 + "1.0",
        "(" * 6 + "1.0" + (" + 1.0" * 4000 + ")") * 6,  # chains on every level: the path adds them up
        ("1.0 + " * 3000 + "array<f32, 1>(1.0)[0] + ") * 7 + "1.0",  # a template's comma is no break in the chain
        "array<" * 2000 + "f32" + ", 1>" * 2000 + "()[0]",  # template lists nest too
        # Review helper 33: forms the depth estimate did not see (each killed naga at 20,000).
        "vec4<f32>(1.0)" + ".xyzw" * 20000 + ".x",  # member steps
        "select(0.0, 1.0, material < 1.0" + " + 1.0" * 20000 + ")",  # a name that is no template
        "f32(array<f32, 1" + "*1" * 20000 + ">()[0])",  # operators inside a template list
    ],
)
def test_deep_nesting_and_chains_over_nested_levels_are_lowering_errors(expr):
    with pytest.raises(LoweringError) as info:
        lower(parse(SIMPLE_YAML, "k/bindings.yaml"), "const material: f32 = 0.0;\n" + simple_body(expr), {}, wgsl_path="k/kernel.wgsl")
    assert info.value.span.path == "k/kernel.wgsl" and info.value.span.line == 6


def test_wide_expressions_are_not_deep_ones():
    # A table of 5,000 signed literals, and three sibling arguments of 2,000 operators each.
    table = "array<f32, 5000>(" + ", ".join(f"-{k}.5" for k in range(5000)) + ")[i % 5000u]"
    lower(parse(SIMPLE_YAML, "k/bindings.yaml"), simple_body(table), {}, wgsl_path="k/kernel.wgsl")
    siblings = "max(" + ", ".join(["1.0" + " + 1.0" * 2000] * 2) + ")"
    lower(parse(SIMPLE_YAML, "k/bindings.yaml"), simple_body(siblings), {}, wgsl_path="k/kernel.wgsl")
    # Review helper 31: 2,100 bracketed terms side by side (a generated filter) are 2,100 deep,
    # not 4,200 (their operators summed).
    terms = " + ".join(["(f32(i) * 0.5)"] * 2100)
    lower(parse(SIMPLE_YAML, "k/bindings.yaml"), simple_body(terms), {}, wgsl_path="k/kernel.wgsl")
    taps = " + ".join(f"dst_get({k % 7}u) * {k % 5}.5" for k in range(2100))  # a flat 2,100-tap filter
    lower(parse(SIMPLE_YAML, "k/bindings.yaml"), simple_body(taps), {}, wgsl_path="k/kernel.wgsl")


def test_a_hot_reload_to_an_operator_bomb_keeps_the_last_good_kernel(tmp_path, make_library):
    root = str(tmp_path / "assets")
    folder = simple_asset(root, "k", simple_body("1.0"))
    lib = make_library(root)
    ref = lib.load("k.computeShader")
    assert abi.read(ref.variant().run(n=4).outputs["dst"]).tolist() == [1.0] * 4
    lib.watch()
    wait_watching(lib, folder)
    tmp = os.path.join(folder, ".kernel.tmp")
    write(tmp, simple_body("1.0 + " * 20000 + "1.0"))
    os.replace(tmp, os.path.join(folder, "kernel.wgsl"))
    pump(lib, lambda: ref.diagnostics is not None, what="the refused reload")
    assert "kernel.wgsl:5" in ref.diagnostics
    assert abi.read(ref.variant().run(n=4).outputs["dst"]).tolist() == [1.0] * 4  # the last good kernel


HUGE_SPECIALIZE = SIMPLE_YAML + "specialize:\n" + "".join(f"  - {{ name: S{i}, options: [x, y] }}\n" for i in range(40))


def test_a_cross_product_of_2_to_the_40_variants_fails_its_bake_at_once_and_reloads_validate_one(tmp_path, make_library):
    root = str(tmp_path / "assets")
    simple_asset(root, "big", simple_body("1.0"), HUGE_SPECIALIZE)
    make_asset(root, "k")
    t0 = time.monotonic()
    report = bake([root], str(tmp_path / "cache"))
    assert time.monotonic() - t0 < 60
    failed = [f for f in report.failures if "big.computeShader" in str(f)]
    assert failed and "bake:" in str(failed[0])
    # The library validates one variant of an asset nothing uses yet: it loads at once.
    lib = make_library(root)
    ref = lib.load("big.computeShader")
    spec = {f"S{i}": "y" for i in range(40)}
    assert abi.read(ref.program().variant(spec).run(n=2).outputs["dst"]).tolist() == [1.0, 1.0]


def test_a_when_condition_of_thousands_of_alternatives_is_refused_fast():
    alts = "; ".join(f"S=o{k}" for k in range(8000))
    text = (
        "bindings:\n"
        f'  - {{ name: b, kind: buffer, access: read, element: f32, when: "{alts}" }}\n'
        "specialize:\n  - { name: S, options: [" + ", ".join(f"o{k}" for k in range(8000)) + "] }\n"
    )
    t0 = time.monotonic()
    with pytest.raises(SchemaError) as info:
        parse(text, "k/bindings.yaml")
    assert time.monotonic() - t0 < 30  # a hang guard (unbounded: minutes), not a speed figure
    assert info.value.span.path == "k/bindings.yaml" and info.value.span.line == 2


def test_many_same_named_bindings_are_refused_fast():
    # 1,500 (not 4,000): more YAML values than any schema holds are refused first (yaml_nodes.MAX_NODES)
    rows = "".join(f'  - {{ name: b, kind: buffer, access: read, element: f32, when: "S=o{k}" }}\n' for k in range(1500))
    text = "bindings:\n" + rows + "specialize:\n  - { name: S, options: [" + ", ".join(f"o{k}" for k in range(1500)) + "] }\n"
    t0 = time.monotonic()
    with pytest.raises(SchemaError) as info:
        parse(text, "k/bindings.yaml")
    assert time.monotonic() - t0 < 30  # a hang guard (the YAML alone takes seconds on a loaded 2-core machine), not a speed figure
    assert info.value.span.line == 18  # the 17th declaration of 'b'


def test_a_module_folder_outside_the_asset_root_is_read(tmp_path, make_library):
    root = str(tmp_path / "assets")
    shared = str(tmp_path / "shared_modules")
    os.makedirs(shared)
    write(os.path.join(shared, "twice.wgsl"), "fn twice(x: f32) -> f32 { return 2.0 * x; }\n")
    simple_asset(root, "k", "#import twice\n" + simple_body("twice(1.5)"))
    lib = make_library(root, modules=[shared])
    ref = lib.load("k.computeShader")
    assert abi.read(ref.variant().run(n=4).outputs["dst"]).tolist() == [3.0] * 4


@pytest.mark.parametrize("which", ["folder", "file"])
def test_a_file_or_folder_name_that_is_not_utf8_is_an_asset_error_naming_it(tmp_path, make_library, which):
    root = str(tmp_path / "assets")
    asset = os.fsdecode(b"k\xff.computeShader") if which == "folder" else "k.computeShader"
    body = os.fsdecode(b"kern\xff.wgsl") if which == "file" else "kernel.wgsl"
    folder = os.path.join(root, asset)
    try:
        os.makedirs(folder)
    except (UnicodeEncodeError, OSError):
        pytest.skip("this filesystem does not take non-UTF-8 names")
    write(os.path.join(folder, "bindings.yaml"), SIMPLE_YAML)
    write(os.path.join(folder, body), simple_body("1.0"))
    lib = make_library(root)
    with pytest.raises(AssetError) as info:
        lib.load(asset).variant()
    message = str(info.value)
    assert "\\xff" in message and "UTF-8" in message
    message.encode("utf-8")  # printable: no lone surrogates
    assert isinstance(info.value, PluginError)


def test_a_modules_link_inside_the_root_to_a_folder_outside_it_is_still_refused(tmp_path, make_library):
    # Review helper 29: the root's own modules/ folder, a link to outside, counted as a module
    # folder outside the root, which bounded its own files: the asset read a file outside.
    outside = str(tmp_path / "outside")
    os.makedirs(outside)
    write(os.path.join(outside, "secret.wgsl"), "fn secret() -> f32 { return 42.0; }\n")
    root = str(tmp_path / "assets")
    os.makedirs(root)
    os.symlink(outside, os.path.join(root, "modules"))
    simple_asset(root, "k", "#import secret\n" + simple_body("secret()"))
    lib = make_library(root)
    with pytest.raises(AssetError, match="outside the asset root"):
        lib.load("k.computeShader").variant()


def test_a_module_folder_inside_the_root_spelled_through_a_link_is_the_roots(tmp_path, make_library):
    # Review helper 31: judged as written only, a module folder named through a link to the
    # root (or the root named through one) counted as outside it, and its in-root links were refused.
    real = tmp_path / "real"
    root = str(real / "assets")
    os.makedirs(os.path.join(root, "common"))
    os.makedirs(os.path.join(root, "shared"))
    os.symlink(str(real), str(tmp_path / "link"))
    write(os.path.join(root, "common", "val.wgsl"), "fn val() -> f32 { return 3.0; }\n")
    os.symlink("../common/val.wgsl", os.path.join(root, "shared", "val.wgsl"))  # a link inside the root
    simple_asset(root, "k", "#import val\n" + simple_body("val()"))
    for lib_root, shared in ((root, str(tmp_path / "link" / "assets" / "shared")), (str(tmp_path / "link" / "assets"), os.path.join(root, "shared"))):
        ref = make_library(lib_root, modules=[shared]).load("k.computeShader")
        assert abi.read(ref.variant().run(n=2).outputs["dst"]).tolist() == [3.0, 3.0]


CACHED_BOMB_SCRIPT = """
import dataclasses
from engine_plugin.errors import CompileError
from engine_plugin.lowering import lower, parse
from engine_plugin.runtime.compile import compile_lowered
YAML = 'bindings:\\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\\n'
BODY = ("@compute @workgroup_size(64)\\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\\n"
        "    let i = zero_index(gid);\\n    if (i >= zero_n()) { return; }\\n    dst_set(i, 1.0);\\n}\\n")
safe = lower(parse(YAML, "k/bindings.yaml"), BODY, {}, wgsl_path="k/kernel.wgsl")
bomb = "(" * 5000 + "1.0" + ")" * 5000
old = dataclasses.replace(safe, source=safe.source.replace("dst_set(i, 1.0)", "dst_set(i, " + bomb + ")"))
try:
    compile_lowered(old)
except CompileError as exc:
    print("CompileError", str(exc).splitlines()[0])
"""


def test_a_cached_lowering_past_the_depth_bound_is_refused_before_naga_sees_it(tmp_path):
    # Review helper 31: entries an older lowering wrote (before the bound) are served from the
    # cache without lowering again: compiling one killed the process at every start.
    import subprocess
    import sys

    script = tmp_path / "cached_bomb.py"
    script.write_text(CACHED_BOMB_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CompileError k/kernel.wgsl:5" in proc.stdout, proc.stdout


def _else_if_body(arms: int) -> str:
    chain = "if (i == 0u) { v = 0.0; }" + "".join(f" else if (i == {k}u) {{ v = {k}.0; }}" for k in range(1, arms))
    return (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        f"    let i = zero_index(gid);\n    if (i >= zero_n()) {{ return; }}\n    var v = 1.0;\n    {chain}\n    dst_set(i, v);\n}}\n"
    )


def test_a_long_else_if_chain_is_refused_and_a_comment_ends_where_naga_ends_it():
    # Review helper 34: naga nests else-if arms (it crashed past ~6,150); and text after a lone
    # \r (or another line break WGSL knows) in a // comment is code to naga, hidden from checks.
    lower(parse(SIMPLE_YAML, "k/bindings.yaml"), _else_if_body(500), {}, wgsl_path="k/kernel.wgsl")
    with pytest.raises(LoweringError, match="else if"):
        lower(parse(SIMPLE_YAML, "k/bindings.yaml"), _else_if_body(2000), {}, wgsl_path="k/kernel.wgsl")
    for brk in ("\r", "\x0b", "\x0c", "\u0085", "\u2028", "\u2029"):
        body = simple_body("0.0 //" + brk + "+ " + "(" * 300 + "1.0" + ")" * 300)
        # A CR is a line break to editors too: the code after it is checked. The others are
        # refused where they stand (review helper 178): no code hides behind them either.
        with pytest.raises(LoweringError, match="nest" if brk == "\r" else "an editor does not"):
            lower(parse(SIMPLE_YAML, "k/bindings.yaml"), body, {}, wgsl_path="k/kernel.wgsl")


def test_a_kernel_far_larger_than_any_kernel_is_refused_at_once():
    # Review helper 107: a valid 1.4 MiB body (30,000 one-line functions) took 13-16 s and
    # 360 MB to lower, 2.8 MiB 25 s (bake: 114 s, 1 GB); files of 8 MiB are read.
    from engine_plugin.lowering.lower import MAX_KERNEL_CHARS

    yaml = 'bindings:\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\n'
    main = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    dst_set(i, f0(1.0));\n}\n"
    helpers = "".join(f"fn f{i}(x: f32) -> f32 {{ return x + {i}.0; }}\n" for i in range(MAX_KERNEL_CHARS // 40 + 1000))
    t0 = time.monotonic()
    with pytest.raises(LoweringError, match=r"the kernel is \d+ characters: at most 1048576") as info:
        abi.lower(abi.parse(yaml, "big/bindings.yaml"), helpers + main, {}, wgsl_path="big/kernel.wgsl")
    assert info.value.span.path == "big/kernel.wgsl" and time.monotonic() - t0 < 10  # a minute before
    with pytest.raises(LoweringError, match=r"in 1 modules\)"):
        abi.lower(abi.parse(yaml, "big/bindings.yaml"), "#import big\n" + main, {}, wgsl_path="big/kernel.wgsl", modules={"big": ("m/big.wgsl", helpers)})


def test_a_bindings_yaml_that_is_a_folder_is_named_a_folder(tmp_path, make_library):
    # It was called "not a regular file (a FIFO, device or socket?)" (review helper 117).
    folder = make_asset(str(tmp_path / "assets"))
    os.remove(os.path.join(folder, "bindings.yaml"))
    os.mkdir(os.path.join(folder, "bindings.yaml"))
    lib = make_library(str(tmp_path / "assets"))
    with pytest.raises(AssetError) as info:
        lib.load("k.computeShader")
    assert "bindings.yaml" in str(info.value) and "a folder; an asset file must be a plain text file" in str(info.value)


@pytest.mark.parametrize("brk", ["\n", "\r", "\x0b", "\x0c", "\x85", "\u2028", "\u2029"])
def test_an_asset_folder_named_with_a_line_break_lowers_and_runs(tmp_path, brk):
    # Review helper 186: the lowered source's header comment names the asset's files; a
    # newline in the folder's name ended it early and the rest of the name compiled as WGSL
    # ("shader compilation failed in generated code").
    import numpy as np
    from asset_support import make_asset

    from engine_plugin import abi
    from engine_plugin.assets import AssetLibrary

    make_asset(str(tmp_path), name=f"line1{brk}line2")
    lib = AssetLibrary(root=str(tmp_path), cache=str(tmp_path / "cache"))
    try:
        ref = lib.load(f"line1{brk}line2.computeShader")
        variant = ref.program().variant({"T": "f32"})
        header = variant.lowered.source.split("\n", 1)[0]
        assert header.startswith("// engine_plugin: lowered from ") and "line2" in header
        out = variant.run(4, inputs={"src": np.array([1, 2, 3, 4], np.float32)}).outputs["dst"]
        assert abi.read(out).tolist() == [2.0, 4.0, 6.0, 8.0]
    finally:
        lib.close()


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_a_byte_that_is_not_utf8_is_named_at_its_line_and_column(tmp_path, bom):
    # Review helper 195: the error gave a byte offset only.
    from engine_plugin.assets.folder import read_asset_folder

    folder = tmp_path / "k.computeShader"
    folder.mkdir()
    (folder / "bindings.yaml").write_text("bindings:\n  - { name: o, kind: buffer, access: read_write, element: f32, count: 'n' }\n")
    (folder / "kernel.wgsl").write_bytes(bom + "// héllo\r\n// two\n    // caf".encode() + b"\xe9 au lait\n")
    with pytest.raises(AssetError) as info:
        read_asset_folder(str(folder))
    span = info.value.span
    assert (span.line, span.col) == (3, 11) and "0xe9" in str(info.value) and span.text.startswith("    // caf"), (span, str(info.value))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_save_is_named_as_one_not_shown_as_nul_bytes(tmp_path, encoding):
    # Review helper 203: the error echoed the UTF-16 bytes, decoded as UTF-8, as its source line.
    from engine_plugin.assets.folder import read_asset_folder

    folder = tmp_path / "k.computeShader"
    folder.mkdir()
    (folder / "bindings.yaml").write_text("bindings:\n  - { name: o, kind: buffer, access: read_write, element: f32, count: 'n' }\n")
    text = "// a kernel\nfn main() {}\n"
    (folder / "kernel.wgsl").write_bytes(("\ufeff" + text).encode("utf-16-be") if encoding == "utf-16-be" else text.encode("utf-16"))
    with pytest.raises(AssetError, match="UTF-16 text .*save the file as UTF-8") as info:
        read_asset_folder(str(folder))
    assert "\x00" not in str(info.value) and "\ufffd" not in str(info.value)
