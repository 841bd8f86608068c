"""``engine-plugin bake`` of assets that import shared modules: a plain bake succeeds, the
keys cover every imported text (editing a module rebakes exactly the variants of the assets
importing it), and a broken module fails the bake at the module's own file and line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from bake_support import BROKEN_YAML, cli_env, entries, explain, load_report, run_bake, write_asset

pytestmark = pytest.mark.gpu

# BROKEN_YAML's schema (T in f32, i32): two variants per asset.
FACTOR = "fn shared_factor() -> f32 {\n    return 2.0;\n}\n"
VIA = "// a module importing a module\n#import factor\n\nfn via_factor() -> f32 {\n    return shared_factor();\n}\n"
BODY = """#import {module}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = zero_index(gid);
    if (i >= zero_n()) {{ return; }}
    dst_set(i, src_get(i) * T({call}()));
}}
"""
PLAIN = BODY.replace("#import {module}\n", "// imports nothing\n").replace("{call}()", "2.0")


def _tree(root: str) -> None:
    assets = os.path.join(root, "assets")
    os.makedirs(os.path.join(assets, "modules"))
    with open(os.path.join(assets, "modules", "factor.wgsl"), "w") as f:
        f.write(FACTOR)
    with open(os.path.join(assets, "modules", "via.wgsl"), "w") as f:
        f.write(VIA)
    write_asset(os.path.join(assets, "kernels", "direct.computeShader"), BROKEN_YAML, BODY.format(module="factor", call="shared_factor"))
    write_asset(os.path.join(assets, "kernels", "indirect.computeShader"), BROKEN_YAML, BODY.format(module="via", call="via_factor"))
    write_asset(os.path.join(assets, "kernels", "plain.computeShader"), BROKEN_YAML, PLAIN.format())


def _cli(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine_plugin.cli", *args], cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=120)


def _rows(report: dict) -> dict[str, dict]:
    return {os.path.basename(r["asset"]): r for r in report["assets"]}


def test_a_module_edit_rebakes_exactly_the_importers_and_a_broken_module_names_its_line(tmp_path):
    root = str(tmp_path)
    _tree(root)
    first = run_bake(["assets", "--cache", "cache", "--jobs", "2", "--json", "first.json"], cwd=root)
    assert first.returncode == 0, explain(first)
    report = load_report(os.path.join(root, "first.json"))
    assert report["totals"]["baked"] == 6 and report["totals"]["failed"] == 0
    baked_first = set(entries(os.path.join(root, "cache")))

    again = run_bake(["assets", "--cache", "cache", "--jobs", "2", "--json", "again.json"], cwd=root)
    assert again.returncode == 0, explain(again)
    assert load_report(os.path.join(root, "again.json"))["totals"]["skipped"] == 6  # unchanged: nothing to do

    module = os.path.join(root, "assets", "modules", "factor.wgsl")
    with open(module, "w") as f:
        f.write(FACTOR.replace("2.0", "3.0"))
    edited = run_bake(["assets", "--cache", "cache", "--jobs", "2", "--json", "edited.json"], cwd=root)
    assert edited.returncode == 0, explain(edited)
    rows = _rows(load_report(os.path.join(root, "edited.json")))
    # Both importers (one through via.wgsl) rebake; the asset importing nothing is skipped.
    assert (rows["direct.computeShader"]["baked"], rows["indirect.computeShader"]["baked"], rows["plain.computeShader"]["baked"]) == (2, 2, 0)
    assert rows["plain.computeShader"]["skipped"] == 2
    assert len(set(entries(os.path.join(root, "cache"))) - baked_first) == 4

    with open(module, "w") as f:
        f.write(FACTOR.replace("2.0", "3.0 * nope"))
    broken = run_bake(["assets", "--cache", "cache", "--jobs", "1", "--json", "broken.json"], cwd=root)
    assert broken.returncode == 1, explain(broken)
    where = os.path.join("assets", "modules", "factor.wgsl")
    assert f"engine-plugin bake: {where}:2:18: no definition in scope for identifier: `nope`" in broken.stderr, explain(broken)
    failed = _rows(load_report(os.path.join(root, "broken.json")))
    assert (failed["direct.computeShader"]["failed"], failed["indirect.computeShader"]["failed"], failed["plain.computeShader"]["skipped"]) == (2, 2, 2)


def test_an_asset_baked_on_its_own_finds_the_modules_above_it_up_to_the_root_named(tmp_path):
    # On its own an asset's root is the folder holding it (as watch takes it; guessing a
    # project root searched outside it: helpers 107, 110, 112); --root names one further up.
    root = str(tmp_path)
    _tree(root)
    asset = os.path.join("assets", "kernels", "indirect.computeShader")
    alone = run_bake([asset, "--cache", "cache", "--jobs", "1"], cwd=root)
    assert alone.returncode == 1 and "searched: assets/kernels/modules)" in alone.stderr, explain(alone)
    proc = run_bake([asset, "--root", "assets", "--cache", "cache", "--jobs", "1"], cwd=root)
    assert proc.returncode == 0, explain(proc)
    assert len(entries(os.path.join(root, "cache"))) == 2
    os.makedirs(os.path.join(root, "other"))
    outside = run_bake([asset, "--root", "other", "--cache", "cache", "--jobs", "1"], cwd=root)
    assert outside.returncode == 2 and "is not under --root" in outside.stderr, explain(outside)
    # Helper 113: --builtin's packaged kernels keep their own root (bake --builtin --root was refused)
    both = run_bake([asset, "--root", "assets", "--builtin", "--cache", "cache", "--jobs", "1", "-q"], cwd=root)
    assert both.returncode == 0, explain(both)


def test_a_folder_name_that_is_not_utf8_is_spelled_one_way_in_a_bake_error(tmp_path):
    # Review helper 107: "a/bad\xffname.computeShader/bindings.yaml: ... (in a/bad\udcffname
    # .computeShader)": a Python surrogate escape in the message beside the readable spelling.
    root = tmp_path / "a"
    good = os.path.join(str(root), "k.computeShader")
    write_asset(good, BROKEN_YAML, "fn main() {}\n")  # refused by its name before anything is parsed
    os.rename(os.fsencode(good), os.fsencode(str(root)) + b"/bad\xffname.computeShader")
    proc = run_bake(["a", "--cache", "cache", "--jobs", "1", "--json", "r.json"], cwd=str(tmp_path))
    assert proc.returncode == 1, explain(proc)
    assert "bad\\xffname.computeShader/bindings.yaml" in proc.stderr and "(in a/bad\\xffname.computeShader)" in proc.stderr, proc.stderr
    assert "udcff" not in proc.stderr + proc.stdout
    # The JSON report too (helper 110): a lone surrogate there is refused by strict JSON readers.
    text = (tmp_path / "r.json").read_text()
    assert "udcff" not in text and "bad\\\\xffname.computeShader" in text
    assert json.loads(text)["assets"][0]["asset"] == "a/bad\\xffname.computeShader"


def test_json_text_never_raises_on_a_lone_surrogate():
    # Review helper 112: a schema option "\ud800" (YAML accepts it) made info --json and
    # bake --json exit 1 with "engine_plugin bug": shown_path's fsencode raised on it.
    from engine_plugin.files import json_text

    assert json.loads(json_text({"option": "\ud800", "path": "a/bad\udcffname", "ok": "é漢字🙂"})) == {
        "option": "\\ud800",
        "path": "a/bad\\xffname",
        "ok": "é漢字🙂",
    }


def test_modules_folders_outside_the_root_are_baked_as_the_game_loads_them(tmp_path):
    # Left open in round 25: a game loading AssetLibrary(root, modules=[folder]) could not bake
    # its assets (the bake had no way to name that folder: "unknown module"). --modules (bake,
    # info, lower, watch) names it as the library's modules= does, and the entries baked are the
    # ones the game's library finds: it lowers nothing.
    from engine_plugin.assets import AssetLibrary

    root = str(tmp_path)
    shared = os.path.join(root, "studio_modules")
    os.makedirs(shared)
    with open(os.path.join(shared, "factor.wgsl"), "w") as f:
        f.write(FACTOR)
    write_asset(os.path.join(root, "game", "assets", "direct.computeShader"), BROKEN_YAML, BODY.format(module="factor", call="shared_factor"))
    missing = run_bake(["game/assets", "--cache", "cache", "--jobs", "1"], cwd=root)
    assert missing.returncode == 1 and "factor" in missing.stderr, explain(missing)
    proc = run_bake(["game/assets", "--modules", "studio_modules", "--cache", "cache", "--jobs", "1", "--json", "r.json"], cwd=root)
    assert proc.returncode == 0, explain(proc)
    assert load_report(os.path.join(root, "r.json"))["totals"]["baked"] == 2
    for args, want in ((["info", "game/assets"], 1), (["info", "game/assets", "--modules", "studio_modules"], 0)):
        got = _cli(args, root)
        assert got.returncode == want, explain(got)
    lowered = _cli(["lower", "game/assets/direct.computeShader", "--spec", "T=i32", "--modules", "studio_modules"], root)
    assert lowered.returncode == 0 and "fn shared_factor() -> f32" in lowered.stdout, explain(lowered)
    for args, want in ((["watch", "game/assets", "--duration", "0.2", "--json", "--no-cache"], 1), (["watch", "game/assets", "--modules", "studio_modules", "--duration", "0.2", "--json", "--no-cache"], 0)):
        got = _cli(args, root)
        assert got.returncode == want and '"event": "watching"' in got.stdout, explain(got)
    bad = run_bake(["game/assets", "--modules", "nowhere", "--cache", "cache"], cwd=root)
    assert bad.returncode == 2 and "--modules nowhere: not a folder" in bad.stderr, explain(bad)

    lib = AssetLibrary(os.path.join(root, "game", "assets"), cache=os.path.join(root, "cache"), modules=[shared])
    try:
        program = lib.load("direct.computeShader").program()
        for t in ("f32", "i32"):
            program.variant(specialize={"T": t})
        stats = lib.stats()["cache"]
        assert (stats.hits, stats.misses) == (2, 0), stats
    finally:
        lib.close()
