"""The engine-plugin command line as a user runs it (subprocess, exit codes and output)."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args: str, cwd: str = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine_plugin.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_bench_takes_its_own_options_and_writes_json(tmp_path):
    helped = cli("bench", "--help")
    assert helped.returncode == 0 and "--quick" in helped.stdout
    out = tmp_path / "bench.json"
    done = cli("bench", "lowering", "--quick", "--json", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    (result,) = report["results"]
    assert result["name"].startswith("lowering") and result["plugin"] > 0 and report["adapter"]
    to_stdout = cli("bench", "lowering", "--quick", "--json", "-")
    assert to_stdout.returncode == 0 and json.loads(to_stdout.stdout)["results"][0]["name"].startswith("lowering")
    assert "adapter:" in to_stdout.stderr


def test_lower_prints_wgsl_and_a_bad_spec_names_the_yaml_line():
    done = cli("lower", "assets/samples/reference.computeShader", "--spec", "T=f32", "--spec", "FOLD=add")
    assert done.returncode == 0 and "alias T = f32;" in done.stdout and "fn main(" in done.stdout
    bad = cli("lower", "assets/samples/reference.computeShader", "--spec", "T=f32", "--spec", "FOLD=nope")
    assert bad.returncode == 1  # an asset failed (2 is for usage and environment errors)
    assert "reference.computeShader/bindings.yaml:9" in bad.stderr and "add, min, max, mean, set" in bad.stderr
    unknown = cli("lower", "assets/samples/reference.computeShader", "--spec", "BOGUS=1")
    # At the specialisations' own lines, as a bad value is (it named only the file: helper 175).
    assert unknown.returncode == 1 and "reference.computeShader/bindings.yaml:8:" in unknown.stderr and "unknown specialisation 'BOGUS'" in unknown.stderr


def test_info_lists_every_sample_asset_with_its_variant_count():
    done = cli("info", "assets/samples")
    assert done.returncode == 0
    assert "reference.computeShader" in done.stdout and "25 variants" in done.stdout and "particles.computeShader" in done.stdout


def test_cache_stats_on_a_missing_folder_says_so_and_creates_nothing(tmp_path):
    missing = tmp_path / "nope"
    done = cli("cache", "stats", "--cache", str(missing))
    assert done.returncode == 0 and "no variant cache" in done.stdout
    assert not missing.exists()


def test_lower_and_info_take_the_packaged_engine_kernels_by_the_name_a_library_loads(tmp_path):
    # AssetLibrary.load("engine/summary.computeShader") answers from any root; the commands said
    # "no such file or folder" for that name (review helper 65). A folder of that name here wins.
    lowered = cli("lower", "engine/summary.computeShader", "--spec", "T=f32", cwd=str(tmp_path))
    assert lowered.returncode == 0, lowered.stderr
    assert "summary.computeShader/kernel.wgsl" in lowered.stdout.splitlines()[0] and "alias T = f32;" in lowered.stdout
    info = cli("info", "engine/summary.computeShader", cwd=str(tmp_path))
    assert info.returncode == 0 and "3 variants" in info.stdout
    missing = cli("info", "engine/nothing.computeShader", cwd=str(tmp_path))
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr


def test_the_packaged_name_fallback_takes_only_an_asset_inside_the_packaged_root(tmp_path):
    # "info ''", "info engine" and "../demo/assets/..." read package data outside the kernels
    # (review helper 66): a mistyped path must be "no such file or folder".
    for path in ("", "engine", "../demo/assets/heat_step.computeShader", "engine/../../bench/kernels/reference.computeShader"):
        got = cli("info", path, cwd=str(tmp_path))
        assert got.returncode == 2 and "no such file or folder" in got.stderr, (path, got.stdout[-300:], got.stderr[-300:])


def test_the_packaged_name_fallback_normalises_the_name_as_a_library_does(tmp_path):
    for path in ("./engine/summary.computeShader", "engine//summary.computeShader", "engine/./summary.computeShader"):
        got = cli("info", path, cwd=str(tmp_path))
        assert got.returncode == 0, (path, got.stderr[-300:])


def test_a_path_that_is_no_asset_is_a_usage_error_for_lower_and_the_demo(tmp_path):
    # Review helper 152: `lower` of a folder holding assets (or none) and `demo --assets` of a
    # folder without the demo's kernels exited 1 ("an asset failed"), where info, watch and
    # bake exit 2 for a path with no asset: a script could not tell a typo from a broken shader.
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("lower", str(empty))
    assert r.returncode == 2 and "no .computeShader asset at" in r.stderr, r.stderr
    r = cli("lower", os.path.join(REPO, "assets", "samples"))
    assert r.returncode == 2 and "holds 2 (particles.computeShader, reference.computeShader): name one" in r.stderr, r.stderr
    (tmp_path / "file").write_text("x")
    for folder, said in (
        (str(empty), "holds none of the demo's kernels"),
        (str(tmp_path / "missing"), "no such folder"),
        (str(tmp_path / "file"), "not a folder"),
    ):
        r = cli("demo", "--headless", "--frames", "2", "--snapshot", "", "--log", "", "--assets", folder)
        assert r.returncode == 2 and said in r.stderr, r.stderr
    broken = tmp_path / "broken.computeShader"  # named as an asset: a broken one, exit 1
    broken.mkdir()
    r = cli("lower", str(broken))
    assert r.returncode == 1 and "no bindings.yaml" in r.stderr, r.stderr


def test_lower_refuses_a_specialisation_given_twice():
    # Review helper 186: the last of two --spec T=... won, with nothing said.
    twice = cli("lower", "assets/samples/reference.computeShader", "--spec", "T=f32", "--spec", "T=i32")
    assert twice.returncode == 2, twice.stderr
    assert "--spec T given twice ('f32', then 'i32')" in twice.stderr and twice.stdout == ""


def test_an_asset_entry_that_is_no_folder_fails_by_name_in_info_and_bake(tmp_path):
    # Review helper 195: a link loop, a link to nothing and a plain file named *.computeShader
    # were skipped silently: info and bake exited 0 and named none of them.
    import shutil

    root = tmp_path / "assets"
    root.mkdir()
    shutil.copytree(os.path.join(REPO, "assets", "samples", "particles.computeShader"), root / "real.computeShader")
    os.symlink("self.computeShader", root / "self.computeShader")
    os.symlink("missing_target", root / "gone.computeShader")
    (root / "file.computeShader").write_text("not a folder")
    want = {
        "self.computeShader": "a symbolic link loop",
        "gone.computeShader": "a symbolic link to 'missing_target', which does not exist",
        "file.computeShader": "a file, not a folder",
    }
    for args in (["info", str(root)], ["-q", "bake", str(root), "--cache", str(tmp_path / "cache"), "--jobs", "1"]):
        done = cli(*args)
        assert done.returncode == 1, done.stderr
        for name, why in want.items():
            assert f"{root / name}: not a .computeShader folder ({why})" in done.stderr, done.stderr
    assert len(os.listdir(tmp_path / "cache")) >= 1  # the real asset still baked


def test_lower_numbered_numbers_each_line_of_the_source_and_ends_with_a_line_break():
    # Review helper 195: it ended with an extra empty "54 | " line and no final line break.
    plain = cli("lower", "assets/samples/reference.computeShader", "--spec", "T=f32", "--spec", "FOLD=add")
    numbered = cli("lower", "assets/samples/reference.computeShader", "--spec", "T=f32", "--spec", "FOLD=add", "--numbered")
    assert plain.returncode == numbered.returncode == 0
    rows = numbered.stdout.split("\n")
    assert numbered.stdout.endswith("\n") and len(rows) - 1 == plain.stdout.count("\n")
    assert [r.split(" | ", 1)[1] if " | " in r else r.rstrip(" |") for r in rows[:-1]] == plain.stdout.split("\n")[:-1]


def test_info_names_a_textures_format_dimension_and_size():
    # Review helper 205: info showed nothing of a storage texture's format, dim or size.
    got = cli("info", "engine_plugin/demo/assets/colorize.computeShader", "--json")
    assert got.returncode == 0, got.stderr
    textures = [b["texture"] for b in json.loads(got.stdout)["assets"][0]["bindings"] if b["kind"] == "storage_texture"]
    assert textures == [{"dim": "2d", "format": "rgba8unorm", "size": None}, {"dim": "2d", "format": "bgra8unorm", "size": None}]
    table = cli("info", "engine_plugin/demo/assets/colorize.computeShader")
    assert table.returncode == 0 and "2d rgba8unorm" in table.stdout, table.stdout


def test_ctrl_c_while_the_command_starts_exits_130_with_one_line_not_a_traceback(monkeypatch, capsys):
    # Review helper 228: a Ctrl-C in the first quarter second (building the parser imports every
    # subcommand) ended the command with a KeyboardInterrupt traceback, killed by SIGINT.
    from engine_plugin import cli as cli_module

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "build_parser", interrupted)
    assert cli_module.main(["info", "assets"]) == 130
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "\nengine-plugin: interrupted (Ctrl-C)\n"


def test_lower_spec_without_a_name_is_a_usage_error_naming_the_form():
    # '--spec =x' exited 1 with "unknown specialisation ''" at the asset's yaml line, as if the
    # asset were broken (review helper 228): a malformed argument is a usage error, exit 2.
    for flag, arg in (("--spec", "=x"), ("--spec", " =f32"), ("--columns", "=a,b")):
        done = cli("lower", "assets/samples/reference.computeShader", flag, arg)
        assert done.returncode == 2, (arg, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"engine-plugin lower: {flag} takes "), done.stderr
        assert ("NAME=VALUE" if flag == "--spec" else "TABLE=col,col") in lines[0] and done.stdout == ""
