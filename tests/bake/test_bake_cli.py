"""``engine-plugin bake`` end to end, in subprocesses, on the real (software) GPU."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from bake_support import (
    BAD_SCHEMA_YAML,
    BROKEN_WGSL,
    BROKEN_YAML,
    SAMPLE_VARIANTS,
    SAMPLES,
    copy_samples,
    entries,
    explain,
    load_report,
    run_bake,
    write_asset,
)

from engine_plugin import abi
from engine_plugin.assets.folder import read_asset_folder
from engine_plugin.cache import UsageLog, VariantCache
from engine_plugin.lowering import enumerate_variants, parse, resolve_spec
from engine_plugin.lowering.fingerprint import variant_key
from engine_plugin.runtime.program import lowering_count

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """The samples copied to ``<root>/samples`` and baked once with ``--jobs 2`` into
    ``<root>/cache-local``: (root, the process, its JSON report)."""
    root = str(tmp_path_factory.mktemp("bake"))
    copy_samples(os.path.join(root, "samples"))
    proc = run_bake(["samples", "--cache", "cache-local", "--jobs", "2", "--json", "first.json"], cwd=root)
    assert proc.returncode == 0, explain(proc)
    return root, proc, load_report(os.path.join(root, "first.json"))


def test_baking_the_samples_twice_skips_everything_the_second_time(baked):
    root, first, report = baked
    assert report["totals"] == {
        "variants": SAMPLE_VARIANTS,
        "baked": SAMPLE_VARIANTS,
        "skipped": 0,
        "failed": 0,
        "assets": 2,
        "assets_failed": 0,
        "planned": SAMPLE_VARIANTS,
    }
    assert report["runner"] == "2 local processes" and report["workers"] == 2
    assert len(entries(os.path.join(root, "cache-local"))) == SAMPLE_VARIANTS

    second = run_bake(["samples", "--cache", "cache-local", "--jobs", "2", "--json", "second.json"], cwd=root)
    assert second.returncode == 0, explain(second)
    again = load_report(os.path.join(root, "second.json"))
    assert again["totals"]["skipped"] == SAMPLE_VARIANTS and again["totals"]["baked"] == 0
    # Nothing to do starts no worker at all.
    assert again["workers"] == 0 and again["runner"].startswith("none")
    assert "to bake on" not in second.stderr
    assert f"skipped {SAMPLE_VARIANTS}" in second.stdout


def test_baked_entries_load_and_run_without_lowering(baked, gpu):
    root, _, report = baked
    cache = VariantCache(os.path.join(root, "cache-local"))
    for v in report["variants"]:
        assert cache.get(v["key"]) is not None, v
    assert cache.stats().corrupt == 0

    src = read_asset_folder(os.path.join(root, "samples", "reference.computeShader"))
    schema = parse(src.yaml_text, src.yaml_path)
    program = abi.program(key="bake-test-reference", schema=schema, wgsl=src.wgsl_text, wgsl_path=src.wgsl_path, device=gpu, store=cache)
    before = lowering_count()
    variant = program.variant({"T": "f32", "FOLD": "add"})
    for spec in enumerate_variants(schema):
        program.variant(spec)
    assert lowering_count() == before, "a baked variant was lowered again"
    run = variant.run(n=8, inputs={"src": np.arange(8, dtype=np.float32), "cols": abi.table({"w": np.full(8, 2.0, np.float32)})})
    assert abi.read(run.outputs["dst"]).tolist() == [1.0, 4.0, 7.0, 10.0, 13.0, 16.0, 19.0, 21.0]


def test_the_json_report_lists_every_variant_with_its_cache_key(baked):
    root, _, report = baked
    assert report["format"] == 1 and report["ok"] is True and report["failures"] == []
    names = set(entries(os.path.join(root, "cache-local")))
    assert {v["key"] + ".msgpack" for v in report["variants"]} == names
    assert {v["status"] for v in report["variants"]} == {"baked"}
    rows = {r["asset"]: r for r in report["assets"]}
    assert rows[os.path.join("samples", "reference.computeShader")]["baked"] == 25
    assert rows[os.path.join("samples", "particles.computeShader")]["baked"] == 1
    ref = [v for v in report["variants"] if v["asset"].endswith("reference.computeShader")]
    assert {(v["spec"]["T"], v["spec"]["FOLD"]) for v in ref} == {
        (t, f) for t in ("f32", "i32", "vec2<f32>", "vec3<f32>", "vec4<f32>") for f in ("add", "min", "max", "mean", "set")
    }
    assert all(v["worker"] and v["seconds"] > 0 for v in report["variants"])
    assert report["variants_per_s"] > 0 and report["wall_s"] > 0


def test_plain_progress_lines_and_a_summary_table_when_not_a_terminal(baked):
    _, first, _ = baked
    assert f"bake: {SAMPLE_VARIANTS} variant(s) to bake on 2 local processes" in first.stderr
    assert f"bake: {SAMPLE_VARIANTS}/{SAMPLE_VARIANTS} variants ({SAMPLE_VARIANTS} baked, 0 failed)" in first.stderr
    for column in ("asset", "variants", "baked", "skipped", "failed", "work time"):
        assert column in first.stdout
    assert "reference.computeShader" in first.stdout and "total" in first.stdout
    assert "\x1b[" not in first.stdout + first.stderr  # no terminal codes in a log


def test_the_dask_path_on_a_local_cluster_writes_the_same_entries_as_the_local_path(baked):
    root, _, _ = baked
    proc = run_bake(["samples", "--cache", "cache-dask", "--dask-local", "2", "--json", "dask.json"], cwd=root)
    assert proc.returncode == 0, explain(proc)
    report = load_report(os.path.join(root, "dask.json"))
    assert report["runner"] == "Dask LocalCluster of 2 processes" and report["workers"] == 2
    assert report["totals"]["baked"] == SAMPLE_VARIANTS
    local, dask = entries(os.path.join(root, "cache-local")), entries(os.path.join(root, "cache-dask"))
    assert sorted(dask) == sorted(local)  # same keys: the same file names
    assert all(dask[name] == local[name] for name in local), "an entry's bytes differ between the local and Dask paths"


def test_a_broken_asset_among_good_ones_fails_the_bake_naming_its_file_and_line(tmp_path):
    copy_samples(str(tmp_path / "assets"))
    write_asset(str(tmp_path / "assets" / "broken.computeShader"), BROKEN_YAML, BROKEN_WGSL)
    write_asset(str(tmp_path / "assets" / "badschema.computeShader"), BAD_SCHEMA_YAML, "// nothing\n")
    proc = run_bake(["assets", "--cache", "cache", "--jobs", "2", "--json", "report.json", "-v"], cwd=str(tmp_path))
    assert proc.returncode == 1, explain(proc)

    wgsl = os.path.join("assets", "broken.computeShader", "kernel.wgsl")
    assert f"engine-plugin bake: {wgsl}:5:29: no definition in scope for identifier: `heigth`" in proc.stderr
    # -v: the source line and the caret follow the one-line error.
    assert "    dst_set(i, src_get(i) * heigth);\n" in proc.stderr and "^" in proc.stderr
    # One broken line breaks both variants; it is printed once and counted.
    assert proc.stderr.count(f"{wgsl}:5:29: no definition") == 1
    assert f"{wgsl}:5:29: the same error in 1 more variant(s)" in proc.stderr
    assert os.path.join("assets", "badschema.computeShader", "bindings.yaml") + ":2:" in proc.stderr
    assert "unknown kind 'bufer'" in proc.stderr

    # The good assets baked regardless.
    assert len(entries(str(tmp_path / "cache"))) == SAMPLE_VARIANTS
    report = load_report(str(tmp_path / "report.json"))
    assert report["ok"] is False
    assert report["totals"] == {
        "variants": SAMPLE_VARIANTS + 2,
        "baked": SAMPLE_VARIANTS,
        "skipped": 0,
        "failed": 2,
        "assets": 4,
        "assets_failed": 1,
        "planned": SAMPLE_VARIANTS + 2,
    }
    compile_failures = [f for f in report["failures"] if f["kind"] == "CompileError"]
    assert {(f["path"], f["line"], f["col"]) for f in compile_failures} == {(wgsl, 5, 29)}
    assert {f["spec"]["T"] for f in compile_failures} == {"f32", "i32"}
    schema_failure = next(f for f in report["failures"] if f["kind"] == "SchemaError")
    assert schema_failure["spec"] is None and schema_failure["line"] == 2
    assert "failed 2 of 28 variants" in proc.stdout and "1 asset(s) could not be read or parsed" in proc.stdout


def test_variants_from_a_usage_log_bakes_exactly_the_recorded_variants(tmp_path):
    copy_samples(str(tmp_path / "assets"))
    src = read_asset_folder(str(tmp_path / "assets" / "reference.computeShader"))
    schema = parse(src.yaml_text, src.yaml_path)
    # A game whose asset root was ``assets`` recorded two variants (and one asset we do not bake).
    log = UsageLog(str(tmp_path / "usage.msgpack"))
    wanted = [resolve_spec(schema, {"T": "f32", "FOLD": "add"}), resolve_spec(schema, {"T": "vec3<f32>", "FOLD": "max"})]
    for spec in wanted:
        log.record("reference.computeShader", spec)
    log.record("elsewhere/other.computeShader", resolve_spec(schema, {"T": "i32", "FOLD": "min"}))
    assert log.flush()

    proc = run_bake(["assets", "--cache", "cache", "--jobs", "1", "--variants-from", "usage.msgpack", "--json", "r.json"], cwd=str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    expected = {variant_key(schema.text, src.wgsl_text, s) + ".msgpack" for s in wanted}
    assert set(entries(str(tmp_path / "cache"))) == expected
    report = load_report(str(tmp_path / "r.json"))
    assert report["totals"]["baked"] == 2 and [r["asset"] for r in report["assets"]] == [os.path.join("assets", "reference.computeShader")]
    assert "elsewhere/other.computeShader, which is not among the assets to bake" in proc.stdout
    assert report["runner"] == "this process"


def test_the_report_may_not_replace_the_usage_log_or_an_assets_file(tmp_path):
    # Review helper 200: --json replaced the game's usage log (or the shader) and exited 0.
    copy_samples(str(tmp_path / "assets"))
    src = read_asset_folder(str(tmp_path / "assets" / "reference.computeShader"))
    schema = parse(src.yaml_text, src.yaml_path)
    log = UsageLog(str(tmp_path / "usage.msgpack"))
    log.record("reference.computeShader", resolve_spec(schema, {"T": "f32", "FOLD": "add"}))
    assert log.flush()
    kept = {p: open(tmp_path / p, "rb").read() for p in ("usage.msgpack", "assets/reference.computeShader/kernel.wgsl")}
    os.makedirs(tmp_path / "assets" / "modules", exist_ok=True)
    for target, said in (
        ("usage.msgpack", "the usage log this bake reads"),
        ("assets/reference.computeShader/kernel.wgsl", "inside the asset"),
        ("assets/modules/factor.wgsl", "a shader or module file under assets"),  # review helper 201: an #import module
    ):
        proc = run_bake(["assets", "--cache", "cache", "--jobs", "1", "--variants-from", "usage.msgpack", "--json", target], cwd=str(tmp_path))
        assert proc.returncode == 2 and said in proc.stderr, explain(proc)
    assert {p: open(tmp_path / p, "rb").read() for p in kept} == kept and not os.path.exists(tmp_path / "cache")


def test_a_recorded_variant_the_asset_no_longer_offers_is_a_note_naming_the_log_not_a_failure(tmp_path):
    # An option removed after the game recorded it (or a forged row) failed every bake, blamed
    # on bindings.yaml, until the log was deleted by hand (review helper 128).
    copy_samples(str(tmp_path / "assets"))
    folder = tmp_path / "assets" / "reference.computeShader"
    src = read_asset_folder(str(folder))
    schema = parse(src.yaml_text, src.yaml_path)
    log = UsageLog(str(tmp_path / "usage.msgpack"))
    kept = resolve_spec(schema, {"T": "f32", "FOLD": "add"})
    log.record("reference.computeShader", kept)
    log.record("reference.computeShader", resolve_spec(schema, {"T": "vec4<f32>", "FOLD": "max"}))
    forged = kept.__class__(tuple(sorted({**dict(kept.values), "FOLD": "add; } fn evil() {"}.items())), kept.columns)
    log.record("reference.computeShader", forged)
    assert log.flush()
    yaml = folder / "bindings.yaml"
    yaml.write_text(yaml.read_text().replace("options: [f32, i32, vec2<f32>, vec3<f32>, vec4<f32>]", "options: [f32, i32, vec2<f32>, vec3<f32>]"))
    src = read_asset_folder(str(folder))
    schema = parse(src.yaml_text, src.yaml_path)

    proc = run_bake(["assets", "--cache", "cache", "--jobs", "1", "--variants-from", "usage.msgpack", "--json", "r.json"], cwd=str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    assert set(entries(str(tmp_path / "cache"))) == {variant_key(schema.text, src.wgsl_text, resolve_spec(schema, {"T": "f32", "FOLD": "add"})) + ".msgpack"}
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: the usage log records")]
    assert len(notes) == 2, proc.stdout
    assert any("T='vec4<f32>'" in n and "is not an option" in n and "bindings.yaml" in n for n in notes), notes
    assert any("fn evil" in n for n in notes) and all("left out" in n for n in notes), notes
    report = load_report(str(tmp_path / "r.json"))
    assert report["totals"]["baked"] == 1 and not report["failures"]


def test_a_missing_usage_log_is_a_usage_error(tmp_path):
    copy_samples(str(tmp_path / "assets"))
    proc = run_bake(["assets", "--cache", "cache", "--variants-from", "nope.msgpack"], cwd=str(tmp_path))
    assert proc.returncode == 2 and "no usage log at nope.msgpack" in proc.stderr, explain(proc)


@pytest.mark.parametrize("option", [["--dask-local", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]])
def test_without_dask_the_dask_options_say_how_to_install_it_and_exit_2(tmp_path, option):
    copy_samples(str(tmp_path / "assets"))
    hide = "import sys; sys.modules['distributed'] = None; sys.modules['dask'] = None"
    proc = run_bake(["assets", "--cache", "cache", *option], cwd=str(tmp_path), prelude=hide)
    assert proc.returncode == 2, explain(proc)
    assert "pip install '.[dask]'" in proc.stderr and "engine_plugin[dask]" in proc.stderr
    assert not os.path.exists(tmp_path / "cache") or entries(str(tmp_path / "cache")) == {}


def test_a_rich_progress_bar_on_a_terminal(tmp_path):
    import pty
    import subprocess
    import sys

    from bake_support import cli_env

    copy_samples(str(tmp_path / "assets"))
    master, slave = pty.openpty()
    try:
        cmd = [sys.executable, "-m", "engine_plugin.cli", "bake", "assets/particles.computeShader", "--cache", "cache", "--jobs", "1"]
        proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=cli_env(), stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        out = proc.stdout.read()
        proc.stdout.close()
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    tty = b"".join(chunks).decode("utf-8", "replace")
    assert "1/1" in tty and "━" in tty, tty
    assert "bake: 1/1 variants" not in tty  # the plain lines are for logs only
    assert "baked 1, skipped 0, failed 0 of 1 variants" in out


def test_the_scheduler_option_bakes_on_an_existing_cluster(baked):
    from distributed import LocalCluster

    root, _, _ = baked
    # A cluster someone else started (here: this test, on loopback); bake only connects to it.
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster:
        proc = run_bake(["samples/particles.computeShader", "--cache", "cache-farm", "--scheduler", cluster.scheduler_address, "--json", "farm.json"], cwd=root)
        assert proc.returncode == 0, explain(proc)
        # Connecting and disconnecting left the cluster (and its worker) up for the next client.
        assert len(cluster.scheduler_info["workers"]) == 1
    report = load_report(os.path.join(root, "farm.json"))
    assert report["runner"].startswith(f"Dask cluster at {cluster.scheduler_address}") and report["totals"]["baked"] == 1
    local = entries(os.path.join(root, "cache-local"))
    farm = entries(os.path.join(root, "cache-farm"))
    assert len(farm) == 1 and all(local[name] == data for name, data in farm.items())


def test_control_characters_in_an_asset_name_are_spelled_out_not_sent_to_the_terminal(tmp_path):
    # An ESC in a folder name reached stderr and the summary raw: a crafted asset pack drove the
    # terminal (or a CI log) of whoever baked it (review helper 128).
    folder = tmp_path / "assets" / "bad\x1b[31mRED.computeShader"
    folder.mkdir(parents=True)
    (folder / "bindings.yaml").write_text("bindings: [\n")
    (folder / "kernel.wgsl").write_text("fn main() {}\n")
    proc = run_bake(["assets", "--cache", "cache", "--jobs", "1", "--progress", "none"], cwd=str(tmp_path))
    assert proc.returncode == 1, explain(proc)
    assert "\x1b" not in proc.stdout + proc.stderr, explain(proc)
    assert "bad\\x1b[31mRED.computeShader/bindings.yaml:2:1" in proc.stderr, explain(proc)
    assert "bad\\x1b[31mRED.computeShader" in proc.stdout, explain(proc)
    github = run_bake(["assets", "--cache", "cache", "--jobs", "1", "--progress", "none", "--format", "github", "-v"], cwd=str(tmp_path))
    assert "\x1b" not in github.stdout + github.stderr and "::error file=" in github.stdout, explain(github)  # review helper 132


def test_brackets_in_asset_names_are_shown_as_they_are_not_read_as_table_markup(tmp_path):
    # The summary table handed asset paths to rich as markup: k[old].computeShader showed as
    # k.computeShader, and a path holding '[/]' (the folder 'c[' around ']x.computeShader')
    # ended a bake that had written its entries as an engine_plugin bug, exit 1 (review
    # helper 224). The variants are cached beforehand: the bake skips them, compiles nothing.
    from engine_plugin.bake.plan import plan_assets

    names = ["k[old].computeShader", "b[bold]y.computeShader", os.path.join("c[", "]x.computeShader")]
    for name in names:
        write_asset(str(tmp_path / "assets" / name), BROKEN_YAML, BROKEN_WGSL.replace(" * heigth", ""))
    plans, _ = plan_assets([str(tmp_path / "assets")])
    cache = VariantCache(str(tmp_path / "cache"))
    for plan in plans:
        for item in plan.items:
            assert cache.put(item.key, abi.lower(plan.schema, plan.source.wgsl_text, item.spec), validated=True)
    proc = run_bake(["assets", "--cache", "cache", "--progress", "none"], cwd=str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    for name in names:
        assert os.path.join("assets", name) in proc.stdout, explain(proc)
    assert "skipped 6" in proc.stdout, explain(proc)  # two variants an asset


@pytest.mark.parametrize("shape", ["oversized", "truncated"])
def test_an_unreadable_usage_log_is_one_line_saying_why(tmp_path, shape):
    # Review helper 155: an oversized log drew a warning that it was "too large", then the
    # refusal "is not a usage log or records no variants": two lines, the second false.
    import msgpack

    from engine_plugin.cache.usage import MAX_USAGE_VARIANTS

    write_asset(
        str(tmp_path / "assets" / "k.computeShader"), "bindings:\n  - { name: x, kind: buffer, element: f32 }\n", "@compute @workgroup_size(64)\nfn main() {}\n"
    )
    rows = [[[["T", "f32"], ["X", str(i)]], []] for i in range(MAX_USAGE_VARIANTS + 1 if shape == "oversized" else 2)]
    data = msgpack.packb({"magic": "engine_plugin.usage", "format": 1, "assets": {"k.computeShader": rows}})
    (tmp_path / "usage.msgpack").write_bytes(data if shape == "oversized" else data[:-5])
    proc = run_bake(["assets", "--cache", "cache", "--variants-from", "usage.msgpack"], cwd=str(tmp_path))
    assert proc.returncode == 2, explain(proc)
    (line,) = proc.stderr.splitlines()
    said = "is too large (more than 100000 variants)" if shape == "oversized" else "is malformed"
    assert line.startswith("engine-plugin bake: usage log usage.msgpack ") and said in line, line


def test_builtin_bakes_the_packaged_kernels_beside_the_projects_own_assets(tmp_path):
    # Review helper 155: --builtin ("also bake the kernels shipped in the package") without a
    # path baked only the packaged kernels, leaving the project's own assets/ out.
    import json

    write_asset(
        str(tmp_path / "assets" / "k.computeShader"), "bindings:\n  - { name: x, kind: buffer, element: f32 }\n", "@compute @workgroup_size(64)\nfn main() {}\n"
    )
    proc = run_bake(["--builtin", "--cache", "cache", "--jobs", "1", "--json", "-"], cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, explain(proc)
    report = json.loads(proc.stdout)
    assets = [a["asset"] for a in report["assets"]]
    assert any(a.endswith("k.computeShader") for a in assets) and any("summary.computeShader" in a for a in assets), assets


def test_builtin_bakes_when_assets_holds_no_shaders_or_lies_outside_the_root(tmp_path):
    # Review helper 156: after the fix above, an art folder named assets/ (no shaders) failed
    # `bake --builtin` ("no .computeShader assets under assets"), and so did --root elsewhere.
    (tmp_path / "assets" / "textures").mkdir(parents=True)
    proc = run_bake(["--builtin", "--cache", "cache", "--jobs", "1", "-q"], cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, explain(proc)
    write_asset(
        str(tmp_path / "assets" / "k.computeShader"), "bindings:\n  - { name: x, kind: buffer, element: f32 }\n", "@compute @workgroup_size(64)\nfn main() {}\n"
    )
    other = tmp_path / "other"
    write_asset(str(other / "j.computeShader"), "bindings:\n  - { name: x, kind: buffer, element: f32 }\n", "@compute @workgroup_size(64)\nfn main() {}\n")
    proc = run_bake(["--builtin", "--root", str(other), "--cache", "cache", "--jobs", "1", "-q"], cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, explain(proc)


def test_a_bake_into_a_read_only_cache_says_so_once_before_compiling(tmp_path):
    # Review helper 186: on a read-only mount every variant compiled, then each failed its
    # write (one stderr line each, -q too), exit 1. It is an environment error: one line, exit 2.
    # A read-only mount shows as os.access(W_OK) false, which the prelude stands in for (the
    # suite may run as root, for whom a chmod'ed folder stays writable).
    copy_samples(str(tmp_path / "assets"))
    (tmp_path / "ro").mkdir()
    prelude = (
        "import os\n_access = os.access\n"
        "def _ro(path, mode, *a, **k):\n"
        "    if mode & os.W_OK and os.path.abspath(path).startswith(os.path.abspath('ro')):\n"
        "        return False\n"
        "    return _access(path, mode, *a, **k)\n"
        "os.access = _ro\n"
    )
    proc = run_bake(["assets", "--cache", "ro", "-q"], cwd=str(tmp_path), prelude=prelude)
    assert proc.returncode == 2, explain(proc)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "read-only" in lines[0] and f"{SAMPLE_VARIANTS} variant(s) need baking" in lines[0], proc.stderr
    assert entries(str(tmp_path / "ro")) == {}


# Appends a line to particles' body after the first chunk is taken: the asset changes mid-bake.
EDIT_MID_BAKE = (
    "import glob, engine_plugin.bake.driver as d\n"
    "_take = d._Bake.take\n"
    "def _edit_then_take(self, job, result):\n"
    "    _take(self, job, result)\n"
    "    for path in glob.glob('assets/particles.computeShader/*.wgsl'):\n"
    "        with open(path, 'a') as f:\n"
    "            f.write('\\n// edited mid-bake\\n')\n"
    "d._Bake.take = _edit_then_take\n"
)


def test_an_asset_edited_while_it_is_baked_is_named_in_a_note(tmp_path):
    # Review helper 186: the bake exited 0 having baked the text read at its start, nothing said.
    copy_samples(str(tmp_path / "assets"))
    proc = run_bake(["assets", "--cache", "c", "--json", "r.json"], cwd=str(tmp_path), prelude=EDIT_MID_BAKE)
    assert proc.returncode == 0, explain(proc)
    report = load_report(str(tmp_path / "r.json"))
    notes = [n for n in report["notes"] if "changed while it was baked" in n]
    assert len(notes) == 1 and "particles.computeShader" in notes[0], report["notes"]
    assert "particles.computeShader changed while it was baked" in proc.stdout, proc.stdout


def test_an_asset_edited_while_it_is_baked_is_said_under_q(tmp_path):
    # Review helper 241: under -q the bake exited 0 with nothing printed, the asset's current
    # text not baked; only --json held the note. Said on stderr as the eviction note is; the
    # exit status stays 0 (what was read was baked, nothing failed).
    copy_samples(str(tmp_path / "assets"))
    proc = run_bake(["assets", "--cache", "c", "-q"], cwd=str(tmp_path), prelude=EDIT_MID_BAKE)
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout == "", proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("engine-plugin bake: ") and "particles.computeShader changed while it was baked" in lines[0], proc.stderr
    assert "bake again" in lines[0], proc.stderr


def test_entries_the_cache_cap_evicts_during_a_bake_are_counted_and_said_under_q(tmp_path):
    # Review helper 200: with --max-bytes too small the bake exited 0, "ok": true, baked 52,
    # while a dozen entries were on disk; only a note of the table said so.
    copy_samples(str(tmp_path / "assets"))
    proc = run_bake(["assets", "--cache", "cache", "--jobs", "1", "--max-bytes", "40K", "-q", "--json", "r.json"], cwd=str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    report = load_report(str(tmp_path / "r.json"))
    on_disk = len(entries(str(tmp_path / "cache")))
    assert report["evicted"] > 0 and report["totals"]["baked"] - report["evicted"] <= on_disk < report["totals"]["baked"], (report["evicted"], on_disk)
    assert "the cache cap evicted" in proc.stderr, proc.stderr


def test_bake_force_on_a_full_disk_says_each_failed_write_once(tmp_path):
    # Review helper 228: the first failing write was said twice, as the cache's own warning
    # ("variant cache: cannot write ...") and as that variant's error. A full disk stands in
    # as the store's atomic writer raising ENOSPC.
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    prelude = (
        "import errno, engine_plugin.cache.store as s\n"
        "def _full(*a, **k):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "s.write_atomic = _full\n"
    )
    proc = run_bake(["assets", "--cache", "c", "--force", "--jobs", "1"], cwd=str(tmp_path), prelude=prelude)
    assert proc.returncode == 1, explain(proc)
    said = [line for line in proc.stderr.splitlines() if "No space left on device" in line]
    assert len(said) == 1 and "cannot write the cache entry" in said[0] and "particles.computeShader" in said[0], proc.stderr


def test_a_read_only_cache_names_an_entry_it_holds_but_cannot_read_and_why(tmp_path):
    # Review helper 228: with the entry mode 000 in a read-only cache (555), the bake exited 2
    # saying only "1 variant(s) need baking", not that the entry is there but cannot be read.
    # As in the read-only test above, os.access stands in for the mount; the entry's open
    # raises EACCES as a chmod 000 would for a user who is not root.
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    proc = run_bake(["assets", "--cache", "ro", "--jobs", "1", "-q"], cwd=str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    (name,) = entries(str(tmp_path / "ro"))
    prelude = (
        "import errno, os\nimport engine_plugin.cache.store as s\n_access = os.access\n"
        "def _ro(path, mode, *a, **k):\n"
        "    if mode & os.W_OK and os.path.abspath(path).startswith(os.path.abspath('ro')):\n"
        "        return False\n"
        "    return _access(path, mode, *a, **k)\n"
        "os.access = _ro\n"
        "_open = s.os.open\n"
        "def _denied(path, *a, **k):\n"
        f"    if os.path.basename(os.fspath(path)) == {name!r}:\n"
        "        raise OSError(errno.EACCES, os.strerror(errno.EACCES))\n"
        "    return _open(path, *a, **k)\n"
        "s.os.open = _denied\n"
    )
    proc = run_bake(["assets", "--cache", "ro", "-q"], cwd=str(tmp_path), prelude=prelude)
    assert proc.returncode == 2, explain(proc)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "read-only" in lines[0] and "1 variant(s) need baking" in lines[0], proc.stderr
    assert f"{name}: Permission denied" in lines[0] and "exists but cannot be read" in lines[0], lines[0]
