"""Shared WGSL modules: ``#import NAME`` in a body or a module, resolved transitively, placed
before the body, every module line mapped to the module's own file; errors at the user's
``#import`` line and column; the cache key covers every imported text."""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.assets.folder import read_asset_folder
from engine_plugin.errors import CompileError, LoweringError
from engine_plugin.lowering import lower, parse
from engine_plugin.lowering.fingerprint import variant_key
from engine_plugin.lowering.modules import Module

YAML = "k/bindings.yaml"
WGSL = "k/kernel.wgsl"
SCHEMA = """bindings:
  - { name: src, kind: buffer, access: read, element: u32 }
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "len(src)" }
"""
BODY = """// mixes each value with a shared hash
#import mix

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, mix_value(src_get(i)));
}
"""
HASH = "fn hash_step(x: u32) -> u32 {\n    return x * 3u + 1u;\n}\n"
MIX = "#import hash\n\nfn mix_value(x: u32) -> u32 {\n    return hash_step(x) + 100u;\n}\n"
MODULES = {"hash": ("m/hash.wgsl", HASH), "mix": ("m/mix.wgsl", MIX)}
MAIN = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {}\n"


def _lower(body: str = BODY, modules=MODULES):
    return lower(parse(SCHEMA, YAML), body, {}, wgsl_path=WGSL, modules=modules)


def _error(body: str = BODY, modules=MODULES) -> LoweringError:
    with pytest.raises(LoweringError) as info:
        _lower(body, modules)
    return info.value


def test_every_module_line_maps_to_the_module_file_dependencies_first():
    lowered = _lower()
    lines = lowered.source.split("\n")
    sm = lowered.source_map
    assert sm.files == (YAML, WGSL, "m/hash.wgsl", "m/mix.wgsl")  # hash before mix, which imports it
    for path, text in (("m/hash.wgsl", HASH), ("m/mix.wgsl", MIX)):
        mapped = [(i + 1, sm.locate(i + 1)) for i in range(len(lines))]
        rows = [(n, span) for n, span in mapped if span is not None and span.path == path]
        assert [span.line for _, span in rows] == list(range(1, text.count("\n") + 2))
        for n, span in rows:
            own = text.split("\n")[span.line - 1]
            # The lowered line is the module's own, its #import blanked in place; the caret text is the module's.
            assert lines[n - 1] == ("" if own.startswith("#import") else own) and span.text == own
    assert not any(line.lstrip().startswith("#") for line in lines)
    body_span = sm.locate(lines.index("    dst_set(i, mix_value(src_get(i)));") + 1, 5)
    assert (body_span.path, body_span.line, body_span.col) == (WGSL, 8, 5)  # the body keeps its own lines


def test_a_diamond_imports_each_module_once_in_dependency_order():
    modules = {
        "a": ("m/a.wgsl", "#import b\n#import c\nfn fa() -> u32 { return fb() + fc(); }\n"),
        "b": ("m/b.wgsl", "#import c\nfn fb() -> u32 { return fc(); }\n"),
        "c": ("m/c.wgsl", "fn fc() -> u32 { return 1u; }\n"),
        "unused": ("m/unused.wgsl", "this is not WGSL and is never read\n"),
    }
    lowered = _lower("#import a\n#import c\n" + MAIN, modules)
    assert lowered.source_map.files[2:] == ("m/c.wgsl", "m/b.wgsl", "m/a.wgsl")
    assert lowered.source.count("fn fc()") == 1 and "never read" not in lowered.source


def test_an_import_cycle_is_refused_naming_both_lines():
    modules = {"a": ("m/a.wgsl", "// a\n#import b\n"), "b": ("m/b.wgsl", "#import c\n"), "c": ("m/c.wgsl", "\n\n  #import a\n")}
    err = _error("#import a\n" + MAIN, modules)
    assert (err.path, err.line, err.col) == ("m/c.wgsl", 3, 11)
    assert "import cycle (a -> b -> c -> a)" in err.message
    assert err.notes == ("m/a.wgsl:2: a imports b here",)
    itself = _error("#import a\n" + MAIN, {"a": ("m/a.wgsl", "#import a\n")})
    assert (itself.path, itself.line, itself.col) == ("m/a.wgsl", 1, 9) and "(a -> a)" in itself.message


def test_an_unknown_module_is_named_at_its_import_line_and_column():
    err = _error(BODY.replace("#import mix", "  #import nosuch  // helpers"))
    assert (err.path, err.line, err.col) == (WGSL, 2, 11)
    assert "no module nosuch.wgsl (searched: the modules given: hash, mix)" in err.message
    inner = _error(modules={"mix": MODULES["mix"]})  # mix's own import of hash
    assert (inner.path, inner.line, inner.col) == ("m/mix.wgsl", 1, 9)


def test_an_unknown_module_lists_the_folders_searched(tmp_path):
    root = tmp_path / "assets"
    folder = root / "kernels" / "k.computeShader"
    os.makedirs(folder)
    os.makedirs(root / "modules")
    (folder / "bindings.yaml").write_text(SCHEMA)
    (folder / "kernel.wgsl").write_text(BODY)
    with pytest.raises(LoweringError) as info:
        read_asset_folder(str(folder), root=str(root))
    err = info.value
    assert (err.path, err.line, err.col) == (str(folder / "kernel.wgsl"), 2, 9)
    assert f"(searched: {root / 'kernels' / 'modules'}, {root / 'modules'})" in err.message
    (root / "modules" / "mix.wgsl").write_text(MIX)
    (root / "kernels" / "modules").mkdir()
    (root / "kernels" / "modules" / "hash.wgsl").write_text(HASH)  # the nearest modules/ folder
    src = read_asset_folder(str(folder), root=str(root))
    assert [(m.name, m.path) for m in src.modules] == [("hash", str(root / "kernels" / "modules" / "hash.wgsl")), ("mix", str(root / "modules" / "mix.wgsl"))]


def test_an_asset_read_on_its_own_searches_up_to_the_folder_holding_it_or_the_root_named(tmp_path, capsys, monkeypatch):
    # Review helpers 107, 110 and 112: `bake x.computeShader`, `lower` and `info` searched
    # every folder above the asset up to / (a modules/ folder planted in /tmp was compiled in),
    # and guessed project roots searched outside the project from some working folders and
    # disagreed with `bake` of the folder and `watch`. On its own an asset's root is the folder
    # holding it; --root names one further up; info searches up to the folder it is given.
    from engine_plugin.cli import main

    project = tmp_path / "project"
    folder = project / "assets" / "k.computeShader"
    os.makedirs(folder)
    os.makedirs(project / "modules")
    (project / "modules" / "mix.wgsl").write_text(MIX)  # above the asset root
    (project / "modules" / "hash.wgsl").write_text(HASH)
    (folder / "bindings.yaml").write_text(SCHEMA)
    (folder / "kernel.wgsl").write_text(BODY)
    with pytest.raises(LoweringError, match=r"no module mix.wgsl \(searched: " + str(project / "assets" / "modules").replace("/", "/") + r"\)"):
        read_asset_folder(str(folder))
    assert [m.name for m in read_asset_folder(str(folder), root=str(project)).modules] == ["hash", "mix"]  # a root that holds them
    for args in (["lower", str(folder)], ["info", str(project / "assets")], ["bake", str(folder), "--cache", str(tmp_path / "c"), "-q", "-j", "1"]):
        assert main(args) == 1, args
        assert "no module mix.wgsl" in capsys.readouterr().err
    monkeypatch.chdir(project)  # a relative path, from the project: up to assets/, as `bake assets`
    for args in (["lower", "assets/k.computeShader"], ["bake", "assets/k.computeShader", "--cache", str(tmp_path / "c"), "-q", "-j", "1"]):
        assert main(args) == 1, args
        assert "no module mix.wgsl (searched: assets/modules)" in capsys.readouterr().err
    assert main(["lower", "assets/k.computeShader", "--root", "."]) == 0 and "fn mix_value" in capsys.readouterr().out  # named
    # Helper 113: info takes --root too; a root that is the asset, or outside it, is refused;
    # a root reached through a link still holds the asset (compared resolved too).
    assert main(["info", "assets/k.computeShader", "--root", "."]) == 0
    capsys.readouterr()
    for root, says in (("assets/k.computeShader", "is an asset"), ("assets/other", "not under --root")):
        os.makedirs(root, exist_ok=True) if root.endswith("other") else None
        for cmd in ("lower", "info"):
            assert main([cmd, "assets/k.computeShader", "--root", root]) == 2, (cmd, root)
            assert says in capsys.readouterr().err
    os.symlink(project, tmp_path / "link")
    assert main(["lower", str(tmp_path / "link" / "assets" / "k.computeShader"), "--root", str(project)]) == 0
    assert main(["lower", "assets/k.computeShader", "--root", str(tmp_path / "link")]) == 0
    capsys.readouterr()
    # ...and still the nearest module first (helper 114: through a link the root's own won)
    os.makedirs("assets/modules")
    with open("assets/modules/mix.wgsl", "w") as f:
        f.write(MIX.replace("100u", "222u"))
    for args in (["--root", str(tmp_path / "link")], ["--root", "."]):
        assert main(["lower", "assets/k.computeShader", *args]) == 0, args
        assert "222u" in capsys.readouterr().out, args
    os.remove("assets/modules/mix.wgsl")
    os.rmdir("assets/modules")
    os.symlink(project / "assets" / "k.computeShader", tmp_path / "asset_link")
    assert main(["lower", "assets/k.computeShader/", "--root", str(tmp_path / "asset_link")]) == 2  # a root that is an asset, however spelled
    assert "is an asset" in capsys.readouterr().err
    os.symlink(project / "assets" / "k.computeShader", tmp_path / "alias")  # a link to it named otherwise (helper 115)
    assert main(["lower", str(tmp_path / "alias"), "--root", str(tmp_path / "alias")]) == 2
    assert "is an asset" in capsys.readouterr().err
    os.rename(project / "modules", project / "assets" / "modules")
    assert main(["lower", "assets/k.computeShader"]) == 0 and "fn mix_value" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line, message",
    [
        ('#import "mix.wgsl"', "name the module without quotes or '.wgsl', e.g. '#import mix'"),
        ("#import mix.wgsl", "e.g. '#import mix'"),
        ("#import", "a module name is an identifier"),
        ("#import ../mix", "a module name is an identifier"),
        ("#importmix", "malformed '#import'"),
    ],
)
def test_a_malformed_import_says_how_to_write_it(line, message):
    err = _error(BODY.replace("#import mix", line))
    assert (err.path, err.line) == (WGSL, 2) and message in err.message


def test_a_module_declaring_a_generated_name_is_refused_at_the_module_line():
    err = _error(modules={**MODULES, "hash": ("m/hash.wgsl", HASH + "\nfn zero_n() -> u32 { return 0u; }\n")})
    assert (err.path, err.line, err.col) == ("m/hash.wgsl", 5, 4)
    assert "'zero_n' is declared in module hash and also generated" in err.message
    binding = _error(modules={**MODULES, "hash": ("m/hash.wgsl", HASH + "@group(0) @binding(7) var<storage> x: array<u32>;\n")})
    assert (binding.path, binding.line, binding.col) == ("m/hash.wgsl", 4, 11) and "@binding" in binding.message
    entry = _error(modules={**MODULES, "hash": ("m/hash.wgsl", HASH + MAIN)})
    assert (entry.path, entry.line) == ("m/hash.wgsl", 5) and "declares 'main'" in entry.message
    brackets = _error(modules={**MODULES, "hash": ("m/hash.wgsl", "fn hash_step(x: u32) -> u32 {\n    return x;\n")})
    assert (brackets.path, brackets.line, brackets.col) == ("m/hash.wgsl", 1, 29) and "never closed" in brackets.message


def test_when_blocks_hold_in_modules_too():
    schema = parse(SCHEMA + "specialize:\n  - { name: M, options: [one, two] }\n", YAML)
    module = "// @when M one\nfn pick() -> u32 { return 1u; }\n// @end\n// @when M two\nfn pick() -> u32 { return 2u; }\n// @end\n"
    body = BODY.replace("mix_value(src_get(i))", "pick()").replace("#import mix", "#import pick")
    one = lower(schema, body, {"M": "one"}, wgsl_path=WGSL, modules={"pick": ("m/pick.wgsl", module)})
    two = lower(schema, body, {"M": "two"}, wgsl_path=WGSL, modules={"pick": ("m/pick.wgsl", module)})
    assert "return 1u" in one.source and "return 2u" not in one.source
    assert "return 2u" in two.source and "return 1u" not in two.source


def test_the_cache_key_covers_every_imported_text_but_not_where_it_lives():
    spec = abi.resolve_spec(parse(SCHEMA, YAML), {})
    hash_m, mix_m = Module("hash", "m/hash.wgsl", HASH), Module("mix", "m/mix.wgsl", MIX)
    key = variant_key(SCHEMA, BODY, spec, (hash_m, mix_m))
    edited = Module("hash", "m/hash.wgsl", HASH.replace("3u", "5u"))
    assert variant_key(SCHEMA, BODY, spec, (edited, mix_m)) != key  # a transitive module's edit
    assert variant_key(SCHEMA, BODY, spec, (hash_m,)) != key
    moved = (Module("hash", "/elsewhere/hash.wgsl", HASH), Module("mix", "/elsewhere/mix.wgsl", MIX))
    assert variant_key(SCHEMA, BODY, spec, moved) == key  # content-addressed, like the asset's own files
    assert variant_key(SCHEMA, MAIN, spec) == variant_key(SCHEMA, MAIN, spec, ())


@pytest.mark.gpu
def test_a_compile_error_inside_a_module_names_the_module_file_line_and_column(gpu):
    broken = {**MODULES, "hash": ("m/hash.wgsl", "fn hash_step(x: u32) -> u32 {\n    return x * 3u + 1.5;\n}\n")}
    program = abi.program(f"modules-error-{id(broken)}", parse(SCHEMA, YAML), BODY, wgsl_path=WGSL, modules=broken, device=gpu)
    with pytest.raises(CompileError) as info:
        program.variant()
    err = info.value
    assert (err.path, err.line) == ("m/hash.wgsl", 2) and err.col is not None and 12 <= err.col <= 23, str(err)
    assert "return x * 3u + 1.5;" in str(err) and "^" in str(err)


@pytest.mark.gpu
def test_a_program_runs_imported_code_and_a_warm_cache_never_serves_the_old_module(gpu, tmp_path):
    from engine_plugin.cache import VariantCache

    schema = parse(SCHEMA, YAML)
    x = np.arange(6, dtype=np.uint32)
    results, keys = [], []
    for step in ("3u", "5u", "3u"):
        cache = VariantCache(str(tmp_path / "cache"))  # a fresh process's view of the same folder
        modules = {**MODULES, "hash": ("m/hash.wgsl", HASH.replace("3u", step))}
        program = abi.program(f"modules-cache-{step}-{len(results)}", schema, BODY, wgsl_path=WGSL, modules=modules, device=gpu, store=cache)
        out = program.variant().run(n=len(x), inputs={"src": x})
        results.append(abi.read(out.outputs["dst"]).tolist())
        keys.append(program.variant_key(abi.resolve_spec(schema, {})))
    assert results[0] == (x * 3 + 101).tolist()
    assert results[1] == (x * 5 + 101).tolist()  # the edited module, although the body and schema are unchanged
    assert results[2] == results[0]
    assert {e.key for e in VariantCache(str(tmp_path / "cache")).entries()} == set(keys) and keys[0] == keys[2] != keys[1]


def test_a_chain_of_too_many_modules_is_refused_not_recursed():
    from engine_plugin.lowering.modules import MAX_MODULES

    chain = {f"m{i}": (f"m/m{i}.wgsl", f"#import m{i + 1}\n") for i in range(MAX_MODULES + 10)}
    err = _error("#import m0\n" + MAIN, chain)
    assert f"more than {MAX_MODULES} modules" in err.message and err.path == f"m/m{MAX_MODULES - 1}.wgsl"


def test_a_module_behind_a_symlink_out_of_the_asset_root_is_refused_unread(tmp_path):
    from engine_plugin.errors import AssetError

    root = tmp_path / "assets"
    folder = root / "k.computeShader"
    os.makedirs(folder)
    os.makedirs(root / "modules")
    (folder / "bindings.yaml").write_text(SCHEMA)
    (folder / "kernel.wgsl").write_text(BODY)
    (tmp_path / "secret.wgsl").write_text("fn mix_value(x: u32) -> u32 { return x; } // secret\n")
    os.symlink(tmp_path / "secret.wgsl", root / "modules" / "mix.wgsl")
    with pytest.raises(AssetError) as info:
        read_asset_folder(str(folder), root=str(root))
    assert info.value.path == str(root / "modules" / "mix.wgsl") and "symlink" in info.value.message and "secret" not in str(info.value)


def test_directives_inside_a_block_comment_are_comment_text():
    # naga reads a commented-out '#import' or '// @when' as a comment; the lowering acted on
    # them ("no module noise.wgsl", "block is never closed") (review helper 63).
    body = "/* an old experiment:\n#import noise\n// @when FOLD add\n*/\n" + BODY
    lowered = _lower(body)
    assert "/* an old experiment:" in lowered.source and lowered.source_map.files == (YAML, WGSL, "m/hash.wgsl", "m/mix.wgsl")
    nested = "/* outer /* inner */\n#import noise\n*/\n" + BODY  # WGSL block comments nest
    _lower(nested)
    with pytest.raises(LoweringError, match="noise"):
        _lower("/* closed */\n#import noise\n" + BODY)  # after the comment: a directive again
