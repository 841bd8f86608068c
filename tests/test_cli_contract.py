"""The CLI contract (``engine-plugin --help``): exit 0/1/2, one-line errors on stderr prefixed with
the subcommand, -q/-v, JSON on stdout, GitHub annotations, named extras, the headless fallback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(REPO, "assets", "samples")

BROKEN_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: T }
  - { name: dst, kind: buffer, access: read_write, element: T, count: "len(src)" }
specialize:
  - { name: T, options: [f32, i32] }
"""
BROKEN_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * heigth);
}
"""


def cli(*args: str, cwd: str = REPO, env: dict | None = None, prelude: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``engine-plugin ARGS`` in a subprocess; ``prelude`` runs first (to hide a module)."""
    if prelude is None:
        cmd = [sys.executable, "-m", "engine_plugin", *args]
    else:
        cmd = [sys.executable, "-c", f"{prelude}\nimport sys\nfrom engine_plugin.cli import main\nsys.exit(main(sys.argv[1:]))", *args]
    full_env = dict(os.environ, COLUMNS="160", **(env or {}))
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


def one_error_line(proc: subprocess.CompletedProcess, command: str) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    assert lines[0].startswith(f"engine-plugin {command}: "), lines[0]
    return lines[0]


@pytest.fixture()
def broken(tmp_path):
    folder = tmp_path / "assets" / "broken.computeShader"
    folder.mkdir(parents=True)
    (folder / "bindings.yaml").write_text(BROKEN_YAML)
    (folder / "kernel.wgsl").write_text(BROKEN_WGSL)
    return tmp_path


def test_version_and_python_dash_m_answer_the_package_version():
    from engine_plugin import __version__

    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"engine-plugin {__version__}"
    via_cli = subprocess.run([sys.executable, "-m", "engine_plugin.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert via_cli.stdout == done.stdout


def test_help_states_the_contract():
    done = cli("--help")
    assert done.returncode == 0
    for words in ("0 ok; 1 an asset or variant failed; 2 a usage or environment error", "one line prefixed with the subcommand", "-v", "-q", '"--json -"'):
        assert words in done.stdout, words
    # What Ctrl-C and SIGTERM exit with was said only in the README (review helper 228).
    flat = " ".join(done.stdout.split())
    assert (
        "130 interrupted by Ctrl-C (143: by SIGTERM)" in flat
        and "watch, once watching, stops on Ctrl-C as asked (0, or 1 when an asset watched is failing)" in flat
    )


@pytest.mark.parametrize(
    "args, command",
    [
        (["bake", "--jobs", "zero"], "bake"),
        (["bake", "--bogus"], "bake"),
        (["lower", "no/such.computeShader"], "lower"),
        (["info", "no/such/folder"], "info"),
        (["cache", "gc", "--cache", os.path.join(REPO, "pyproject.toml")], "cache"),  # a file: not a cache folder (a missing one is nothing to collect, exit 0)
        (["bake", "no/such/folder", "--cache", "c"], "bake"),
        (["bench", "no_such_case"], "bench"),
        (["watch", "no/such/folder"], "watch"),
        # Review helper 117: a file where an asset folder is named failed as a broken asset, exit 1.
        (["info", "file.computeShader"], "info"),
        (["bake", "file.computeShader", "--cache", "c"], "bake"),
        (["lower", "file.computeShader"], "lower"),
        (["lower", os.path.join(REPO, "assets", "samples", "particles.computeShader", "integrate.wgsl")], "lower"),
        (["bake", "--variants-from", "."], "bake"),
        # Review helper 99: these ran (-3 frames at -179372 fps; 0 frames as 300; a log every 0
        # frames as every 1) or came out as "engine_plugin bug", exit 1.
        (["demo", "--headless", "--frames", "-3"], "demo"),
        (["demo", "--headless", "--frames", "0"], "demo"),
        (["demo", "--headless", "--log-every", "0"], "demo"),
        (["demo", "--headless", "--log", "afile/demo.jsonl"], "demo"),
        (["demo", "--headless", "--snapshot", "afile/demo.png"], "demo"),
        (["bench", "kernels", "--sizes", "-5"], "bench"),
        (["bench", "kernels", "--sizes", "abc"], "bench"),
        (["bench", "kernels", "--sizes", "8,"], "bench"),
        (["bench", "kernels", "--reps", "0"], "bench"),
        (["bench", "kernels", "--runs", "1"], "bench"),
        (["bench", "lowering", "--json", "afile/report.json"], "bench"),
        # Review helper 128: an OverflowError traceback, exit 1.
        (["cache", "stats", "--cache", "c", "--max-bytes", "inf"], "cache"),
        (["cache", "gc", "--cache", "c", "--max-bytes", "1e400K"], "cache"),
        (["bake", "--builtin", "--cache", ""], "bake"),  # wrote the entries into the current folder
        (["cache", "clear", "--cache", ""], "cache"),
    ],
)
def test_usage_errors_exit_2_with_one_prefixed_line_on_stderr_and_nothing_on_stdout(tmp_path, args, command):
    (tmp_path / "afile").write_text("")  # a file where a folder is named
    (tmp_path / "file.computeShader").write_text("")  # a file named like an asset
    done = cli(*args, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    one_error_line(done, command)
    assert done.stdout == ""


def test_a_broken_asset_exits_1_under_every_subcommand_with_one_line_and_the_caret_only_with_v(broken):
    asset = os.path.join("assets", "broken.computeShader")
    baked = cli("bake", "assets", "--cache", "c", "--jobs", "1", "-q", cwd=str(broken))
    assert baked.returncode == 1, baked.stderr
    wgsl = os.path.join(asset, "kernel.wgsl")
    # One line per distinct error (both variants fail on the same line: counted, not repeated).
    assert baked.stderr.splitlines() == [
        f"engine-plugin bake: {wgsl}:5:29: no definition in scope for identifier: `heigth` (unknown identifier) (in {asset} variant T=f32)",
        f"engine-plugin bake: {wgsl}:5:29: the same error in 1 more variant(s)",
    ]
    lowered = cli("lower", asset, "--spec", "T=f32", cwd=str(broken))
    assert lowered.returncode == 0  # lowering alone does not compile: the body's typo is the compiler's to find
    bad_spec = cli("lower", asset, "--spec", "T=f64", cwd=str(broken))
    assert bad_spec.returncode == 1 and "bindings.yaml:5" in one_error_line(bad_spec, "lower")
    verbose = cli("bake", "assets", "--cache", "c2", "--jobs", "1", "-v", cwd=str(broken))
    assert verbose.returncode == 1 and "^" in verbose.stderr and "heigth);" in verbose.stderr
    bad_schema = broken / "assets" / "broken.computeShader" / "bindings.yaml"
    bad_schema.write_text("bindings:\n  - { name: src, kind: bufer }\n")
    info = cli("info", "assets", cwd=str(broken))
    assert info.returncode == 1
    assert "bindings.yaml:2:" in one_error_line(info, "info")


def test_no_usable_gpu_is_an_environment_error_exit_2(tmp_path):
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    env = {"ENGINE_PLUGIN_ADAPTER": "no-such-gpu"}
    baked = cli("bake", "assets", "--cache", "c", "--jobs", "1", "-q", cwd=str(tmp_path), env=env)
    assert baked.returncode == 2 and "ENGINE_PLUGIN_ADAPTER='no-such-gpu' matches none" in one_error_line(baked, "bake")
    demo = cli("demo", "--headless", "--frames", "1", "--cache", "c", cwd=str(tmp_path), env=env)
    assert demo.returncode == 2 and "matches none" in one_error_line(demo, "demo")
    # watch checks saves by compiling them: it cannot without an adapter (it reported broken
    # saves as reloaded once the library made programs without a device, helper 76)
    watched = cli("watch", "assets", "--no-cache", cwd=str(tmp_path), env=env)
    assert watched.returncode == 2 and "matches none" in one_error_line(watched, "watch")


def test_bake_json_dash_writes_the_report_to_stdout_and_the_table_to_stderr(tmp_path):
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    done = cli("bake", "assets", "--cache", "c", "--jobs", "1", "--json", "-", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["totals"]["baked"] == 1 and report["ok"] is True
    assert not os.path.exists(tmp_path / "-")
    assert "bake summary" in done.stderr


@pytest.mark.parametrize("report", ["afile/report.json", "adir", "nothing/report.json", "newdir/"])
def test_bake_json_to_a_path_it_cannot_write_is_a_usage_error_before_baking(tmp_path, report):
    # Review helper 80: the bake ran to its end, then a FileExistsError or IsADirectoryError
    # came out as "engine_plugin bug", exit 1.
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    os.symlink(str(tmp_path / "missing"), str(tmp_path / "nothing"))  # a link to nothing (review helper 85)
    done = cli("bake", "assets", "--cache", "c", "--jobs", "1", "-q", "--json", report, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("engine-plugin bake: --json ") and "bug" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()  # refused before anything was baked


def test_bake_format_github_prints_one_annotation_per_failure_from_its_file_line_and_col(broken):
    done = cli("bake", "assets", "--cache", "c", "--jobs", "1", "--format", "github", "-q", cwd=str(broken))
    assert done.returncode == 1
    wgsl = os.path.join("assets", "broken.computeShader", "kernel.wgsl")
    annotations = [line for line in done.stdout.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 2  # both variants
    assert annotations[0].startswith(f"::error file={wgsl},line=5,col=29,title=CompileError::no definition in scope for identifier")
    assert annotations[0].endswith("(variant T=f32)") and annotations[1].endswith("(variant T=i32)")


def test_info_json_and_cache_stats_json_are_json_on_stdout(tmp_path):
    info = cli("info", "assets/samples", "--json")
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    by_name = {os.path.basename(a["asset"]): a for a in data["assets"]}
    assert by_name["reference.computeShader"]["variants"] == 25 and by_name["particles.computeShader"]["variants"] == 1
    assert {b["name"] for b in by_name["reference.computeShader"]["bindings"]} >= {"src", "dst"}

    missing = cli("cache", "stats", "--cache", str(tmp_path / "nope"), "--json")
    assert missing.returncode == 0 and json.loads(missing.stdout) == {"cache": str(tmp_path / "nope"), "exists": False}
    assert not (tmp_path / "nope").exists()
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    assert cli("bake", "assets", "--cache", "c", "--jobs", "1", "-q", cwd=str(tmp_path)).returncode == 0
    stats = cli("cache", "stats", "--cache", "c", "--json", "--verify", cwd=str(tmp_path))
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert data["exists"] is True and data["entries"] == 1 and data["unusable"] == []


def test_info_describes_the_good_assets_beside_a_broken_one_and_exits_1(tmp_path):
    # The first broken asset ended info with nothing on stdout (review helper 117): an editor
    # listing a project's assets lost every good one to one typo.
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "good.computeShader")
    bad = tmp_path / "assets" / "bad.computeShader"
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), bad)
    (bad / "bindings.yaml").write_text("bindings:\n  - { name: src, kind: bufer }\n")
    as_json = cli("info", "assets", "--json", cwd=str(tmp_path))
    assert as_json.returncode == 1
    assert "bindings.yaml:2:" in one_error_line(as_json, "info")
    by_name = {os.path.basename(a["asset"]): a for a in json.loads(as_json.stdout)["assets"]}
    assert by_name["good.computeShader"]["variants"] == 1 and "error" not in by_name["good.computeShader"]
    error = by_name["bad.computeShader"]["error"]
    assert error["kind"] == "SchemaError" and error["path"].endswith("bindings.yaml") and error["line"] == 2 and error["col"] > 0
    as_text = cli("info", "assets", cwd=str(tmp_path))
    assert as_text.returncode == 1 and "good.computeShader" in as_text.stdout and "bad.computeShader" not in as_text.stdout


def test_quiet_bake_prints_nothing_but_errors(tmp_path):
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    done = cli("-q", "bake", "assets", "--cache", "c", "--jobs", "1", cwd=str(tmp_path))
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""


@pytest.mark.parametrize(
    "hidden, args, extra",
    [
        ("rich", ["info", "assets/samples"], "cli"),
        ("PIL", ["demo", "--headless", "--frames", "1"], "demo"),
        ("rich", ["bench", "lowering", "--quick"], "cli"),
    ],
)
def test_a_missing_optional_dependency_names_its_extra_and_exits_2(tmp_path, hidden, args, extra):
    prelude = f"import sys; sys.modules[{hidden!r}] = None"
    done = cli(*args, prelude=prelude, cwd=REPO if args[0] != "demo" else str(tmp_path))
    assert done.returncode == 2, done.stderr
    line = one_error_line(done, args[0])
    assert f"pip install 'engine_plugin[{extra}]'" in line


def test_info_without_rich_prints_plain_lines_under_q_and_names_the_way_out_otherwise():
    # Review helper 204: the README says info takes -q without the [cli] extra; it was refused,
    # and its message began "engine-plugin info: engine-plugin info's tables".
    prelude = "import sys; sys.modules['rich'] = None"
    quiet = cli("-q", "info", "assets/samples/reference.computeShader", prelude=prelude)
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stdout.splitlines()
    assert lines[0].startswith("assets/samples/reference.computeShader  (25 variants") and "  binding src  buffer  read  T" in lines
    assert any(line.startswith("  binding hits  buffer  read_write  vec4<f32>  capacity n * 4  append") for line in lines), lines
    refused = cli("info", "assets/samples/reference.computeShader", prelude=prelude)
    assert refused.returncode == 2
    line = one_error_line(refused, "info")
    assert "info: the tables" in line and "-q" in line and "engine-plugin info's" not in line


def test_a_display_that_cannot_be_opened_falls_back_to_headless_with_one_line(tmp_path):
    pytest.importorskip("glfw", reason="the window needs the demo extra (the H200 machine lacks it; make test installs it)")
    done = cli("demo", "--frames", "3", "--cache", "c", "--snapshot", "out/demo.png", cwd=str(tmp_path), env={"DISPLAY": ":12345"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["engine-plugin demo: cannot open the display ':12345'; running headless"]
    assert (tmp_path / "out" / "demo.png").stat().st_size > 1000  # out/ did not exist: made


def test_watch_json_prints_each_failure_once_then_the_reload_that_fixes_it(broken):
    cmd = [sys.executable, "-m", "engine_plugin", "watch", "assets", "--no-cache", "--json", "--max-events", "2", "--duration", "60"]
    proc = subprocess.Popen(cmd, cwd=str(broken), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    events = []
    try:
        deadline = time.monotonic() + 60
        wgsl = broken / "assets" / "broken.computeShader" / "kernel.wgsl"
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            events.append(json.loads(line))
            if events[-1]["event"] == "watching":
                wgsl.write_text(BROKEN_WGSL.replace("heigth", "heigth2"))  # still broken: a refused reload
            elif events[-1]["event"] == "failure" and len(events) > 2:
                wgsl.write_text(BROKEN_WGSL.replace("heigth", "1.0"))  # fixed: the reload
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # broken when the watch started: reported then too (review helpers 80 and 84)
    assert [e["event"] for e in events] == ["watching", "failure", "failure", "reload"], events
    assert "heigth" in events[1]["message"] and (events[1]["line"], events[1]["col"]) == (5, 29)
    failure, reload = events[2], events[3]
    assert failure["path"].endswith("kernel.wgsl") and (failure["line"], failure["col"]) == (5, 29) and "heigth2" in failure["message"]
    assert reload["asset"] == "broken.computeShader" and reload["generation"] == 1
    assert err == ""  # nothing twice: the library's own warning is not printed as well


@pytest.mark.parametrize(
    "args",
    [
        ["watch", "--quiet-ms", "nan"],
        ["watch", "--duration", "nan"],
        ["watch", "--quiet-ms", "-1"],
        ["bake", "--remote-timeout", "inf"],
        ["watch", "--max-events", "-1"],
    ],
)
def test_a_number_of_seconds_that_is_nan_infinite_or_negative_is_a_usage_error(tmp_path, args):
    # Review helper 80: --quiet-ms nan was taken, and then no save was ever due; --duration nan quit at once.
    done = cli(*args, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert ("finite" in done.stderr or "at least 0" in done.stderr) and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_watch_for_zero_seconds_is_a_usage_error_not_a_watch_until_ctrl_c():
    # Review helper 228: --duration 0 ("stop after S seconds") was taken as no limit.
    try:
        done = cli("watch", os.path.join(SAMPLES, "reference.computeShader"), "--no-cache", "--duration", "0", timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("watch --duration 0 was still watching after 20 s")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "engine-plugin watch: argument --duration: a finite positive number of seconds, not '0' (see: engine-plugin watch --help)\n"


@pytest.mark.parametrize(
    "args",
    [
        ["bake", "-j", "99999999999999999999"],
        ["bake", "--dask-local", "5000"],
        ["bake", "--remote-timeout", "1e30"],
        ["bake", "--remote-ttl", "1e30"],
        ["cache", "stats", "--remote-timeout", "1e30"],
        ["watch", "--duration", "1e300"],
    ],
)
def test_a_number_past_what_the_os_or_a_library_takes_is_a_usage_error(tmp_path, args):
    # Review helper 137: -j 1e20 was an OverflowError traceback ("engine_plugin bug"),
    # --remote-timeout 1e30 one from the socket, and --remote-ttl 1e30 made Redis refuse every
    # write while the bake exited 0.
    done = cli(*args, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "at most" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_nan_quiet_window_is_refused_by_the_library_too(tmp_path):
    from engine_plugin.assets import AssetLibrary

    with pytest.raises(ValueError, match="quiet"):
        AssetLibrary(str(tmp_path), quiet=float("nan"))


def test_watch_prints_a_refused_reload_once_as_one_line_on_stderr(broken):
    cmd = [sys.executable, "-m", "engine_plugin", "watch", "assets", "--no-cache", "--max-events", "1", "--duration", "60"]
    proc = subprocess.Popen(cmd, cwd=str(broken), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        first = proc.stdout.readline()
        assert first.startswith("watching 1 asset(s)"), first
        (broken / "assets" / "broken.computeShader" / "kernel.wgsl").write_text(BROKEN_WGSL.replace("heigth", "heigth2"))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1  # it stops with the asset failing (the exit contract)
    lines = err.splitlines()
    assert len(lines) == 2, err  # each once: the library's own warning is not printed as well
    assert lines[0].startswith("engine-plugin watch: ") and "broken.computeShader does not compile" in lines[0] and "kernel.wgsl:5:29:" in lines[0]
    assert lines[1].startswith("engine-plugin watch: ") and "reload of broken.computeShader failed" in lines[1] and "kernel.wgsl:5:29:" in lines[1]
    assert "heigth2" not in out


def test_json_dash_writes_to_stdout_under_every_subcommand_and_a_closed_pipe_is_no_bug(tmp_path):
    # Review helper 32: 'info --json -' and 'cache stats --json -' were usage errors, though the
    # contract says '--json -' writes to stdout; 'info --json | head' reported a bug.
    samples = os.path.join(REPO, "assets", "samples")
    info = cli("info", samples, "--json", "-")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["assets"]
    assert cli("info", "--json", samples).returncode == 0  # a path right after --json is still the path
    stats = cli("cache", "stats", "--cache", str(tmp_path / "cache"), "--json", "-")
    assert stats.returncode == 0 and json.loads(stats.stdout)["exists"] is False
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine_plugin", "info", samples, "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)
    )
    proc.stdout.close()  # the reader is gone before anything is written (`| head -c 0`)
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "bug" not in err and "Traceback" not in err, err


def test_the_demo_without_rich_names_the_demo_extra(tmp_path):
    # It named [cli] (rich's own extra); with that installed it then failed for [demo] (review
    # helper 65). A shadowing module that refuses to import stands in for a missing rich.
    import os
    import subprocess
    import sys

    (tmp_path / "rich").mkdir()
    (tmp_path / "rich" / "__init__.py").write_text("raise ImportError('rich is not installed (test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "engine_plugin", "demo", "--headless", "--frames", "1"], capture_output=True, text=True, timeout=120, env=env, cwd=str(tmp_path)
    )
    assert proc.returncode == 2, proc.stderr
    assert "engine_plugin[demo]" in proc.stderr and "[cli]" not in proc.stderr


def test_bench_help_lists_the_cases_and_their_letters_without_the_cli_extra(tmp_path):
    # Review helper 84: bench --help needed rich, and named no case; the README's (a)-(i) were refused.
    done = cli("bench", "--help", prelude="import sys; sys.modules['rich'] = None", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "run_host" in text and "readback_latency" in text and "a=run_host" in text and "i=kernels" in text


def test_cache_stats_of_a_file_is_a_usage_error_as_for_gc(tmp_path):
    # Review helper 80: stats said "no variant cache" with exit 0 where gc exits 2.
    (tmp_path / "f").write_text("")
    for sub in ("stats", "gc"):
        done = cli("cache", sub, "--cache", "f", cwd=str(tmp_path))
        assert done.returncode == 2 and ("not a folder" in done.stderr or "no variant cache" in done.stderr), (sub, done.stderr)


def test_watch_prints_a_diagnostic_once_when_the_same_broken_text_is_saved_again(broken):
    # Review helper 99: re-saving (or touching) a broken file printed the same failure again.
    cmd = [sys.executable, "-m", "engine_plugin", "watch", "assets", "--no-cache", "--json", "--max-events", "2", "--duration", "60"]
    proc = subprocess.Popen(cmd, cwd=str(broken), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    events = []
    try:
        wgsl = broken / "assets" / "broken.computeShader" / "kernel.wgsl"
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            events.append(json.loads(line))
            if events[-1]["event"] == "watching":
                for text in (BROKEN_WGSL, BROKEN_WGSL.replace("heigth", "heigth2"), BROKEN_WGSL.replace("heigth", "heigth2")):
                    wgsl.write_text(text)  # the same text again, then another error saved twice
                    time.sleep(1.0)  # each save read on its own (the quiet window is 30 ms)
                wgsl.write_text(BROKEN_WGSL.replace("heigth", "1.0"))  # fixed: the reload ends the watch
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [e["event"] for e in events] == ["watching", "failure", "failure", "reload"], events
    assert "heigth2" in events[2]["message"]


def test_the_lowering_benchs_note_counts_the_lowerings_it_timed(tmp_path):
    done = cli("bench", "lowering", "--quick", "--json", "-", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["results"]
    assert row["note"] == "median over 100 lowerings", row


def test_the_headless_demos_p95_is_never_below_its_median():
    from engine_plugin.demo.headless import nearest_rank

    assert nearest_rank([23.4, 112.0], 0.95) == 112.0  # two frames: p95 read the minimum
    assert nearest_rank([1.0, 2.0, 3.0], 0.5) == 2.0 and nearest_rank([], 0.95) == 0.0
    assert nearest_rank([float(v) for v in range(1, 101)], 0.95) == 95.0


@pytest.mark.parametrize(("log", "why"), [("/dev/full", "No space left on device"), ("/proc/nope/demo.jsonl", "No such file or directory")])
def test_a_demo_log_the_disk_refuses_is_an_environment_error(tmp_path, log, why):
    # A full disk or a folder /proc will not make was "engine_plugin bug, please report", exit 1
    # (review helper 128); a log the system refuses is the environment's, exit 2.
    if not os.path.exists(log.split("/nope")[0] if "/nope" in log else log):
        pytest.skip(f"no {log} on this system")
    done = cli(
        "demo", "--headless", "--frames", "12", "--log-every", "1", "--snapshot", "", "--log", log, "--cache", str(tmp_path / "cache"), cwd=str(tmp_path)
    )
    assert done.returncode == 2, done.stderr
    line = one_error_line(done, "demo")
    assert why in line and "bug" not in line, line


def test_info_lower_and_argument_errors_spell_out_control_characters(tmp_path):
    # An ESC in an asset folder's name (or a source option, a comment) reached the terminal raw
    # through info's table, lower's header and the unrecognized-arguments line (review helper 133).
    import shutil

    asset = tmp_path / "e\x1b[31mred.computeShader"
    shutil.copytree(os.path.join(REPO, "assets", "seed", "seed.computeShader"), asset)
    wgsl = asset / "kernel.wgsl"
    wgsl.write_text("// hi \x1b[31mRED\x1b[0m\n" + wgsl.read_text())
    for args in (("info", str(tmp_path)), ("lower", str(asset)), ("info", str(tmp_path), str(asset))):
        done = cli(*args, cwd=str(tmp_path))
        assert "\x1b" not in done.stdout + done.stderr, (args, done.stdout[-400:], done.stderr[-400:])
        assert "\\x1b[31m" in done.stdout + done.stderr, (args, done.stdout[-400:], done.stderr[-400:])


def test_bake_json_writes_through_a_link_and_into_a_fifo(tmp_path):
    # The report replaced a link with a regular file (its target never written) and a FIFO
    # with a file (its reader got nothing); as root, --json /dev/full replaced the device node
    # itself (review helper 167). Written through, as a shell redirection does.
    import threading

    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    (tmp_path / "reports").mkdir()
    os.symlink("reports/latest.json", str(tmp_path / "link.json"))
    done = cli("bake", "assets", "--cache", "c", "--jobs", "1", "-q", "--json", "link.json", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert os.path.islink(tmp_path / "link.json") and json.loads((tmp_path / "reports" / "latest.json").read_text())["ok"] is True
    os.mkfifo(str(tmp_path / "pipe.json"))
    got: list = []
    reader = threading.Thread(target=lambda: got.append(open(tmp_path / "pipe.json").read()), daemon=True)
    reader.start()
    done = cli("bake", "assets", "--cache", "c", "--jobs", "1", "-q", "--json", "pipe.json", cwd=str(tmp_path))
    reader.join(30)
    assert done.returncode == 0, done.stderr
    assert got and json.loads(got[0])["ok"] is True
    assert not os.path.isfile(tmp_path / "pipe.json") or os.path.islink(tmp_path / "pipe.json") or (tmp_path / "pipe.json").is_fifo()


def test_a_report_that_cannot_be_written_is_a_usage_error_naming_it(tmp_path, monkeypatch):
    # ENOSPC while writing the report came out as "engine_plugin bug, please report" (helper 167).
    import errno

    from engine_plugin.commands.contract import UsageError, write_json

    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(UsageError, match=r"out/report.json: cannot write the JSON report \(No space left on device\)"):
        write_json({"ok": True}, str(tmp_path / "out" / "report.json"))
    monkeypatch.setattr(os, "write", real)
    assert not os.path.exists(tmp_path / "out" / "report.json")


@pytest.mark.parametrize("snapshot", ["out/snap", "out/snap.txt", "out/snap.jpg", "/proc/nope/x.png"])
def test_a_demo_snapshot_it_cannot_write_as_a_png_is_refused_before_any_frame(tmp_path, snapshot):
    # The frames ran, then Pillow refused the name: 'engine_plugin bug' for .txt or none, a
    # JPEG of RGBA refused late, a folder /proc refuses a bug too (review helper 171).
    done = cli("demo", "--headless", "--frames", "3", "--snapshot", snapshot, "--log", "", "--cache", str(tmp_path / "cache"), cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("engine-plugin demo: --snapshot ") and "bug" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # refused before the demo started


def test_info_into_a_pipe_keeps_each_asset_path_on_one_line(tmp_path):
    # A table title wraps at the table's width: long asset paths were broken across lines in
    # a pipe, so they could not be copied or grepped (review helper 171).
    deep = tmp_path / ("a_rather_long_folder_name_for_assets_" * 3) / "assets"
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), deep / "particles.computeShader")
    done = cli("info", str(deep), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert any(line.startswith(str(deep / "particles.computeShader")) for line in done.stdout.splitlines()), done.stdout


def test_the_demo_does_not_name_a_variant_cache_it_could_not_make(tmp_path):
    # Review helper 190: the cache was disabled (warned), then the last line named the folder
    # as if it held the variants.
    (tmp_path / "a-file").write_text("")
    done = cli("demo", "--headless", "--frames", "2", "--snapshot", "", "--log", "", "--cache", str(tmp_path / "a-file" / "cache"), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "variant cache disabled" in done.stdout and str(tmp_path / "a-file" / "cache") not in done.stdout, done.stdout


@pytest.mark.parametrize("verbosity", [0, 1])
def test_an_error_logged_whole_is_its_headline_on_one_line_without_v(verbosity):
    # Review helper 195: the demo's failed-reload log carried the source line and caret
    # flattened into its one line ("...:27:5: expected ';' ... let t = ...; ^").
    import io
    import logging

    from engine_plugin.commands.contract import Reporter, configure_logging
    from engine_plugin.errors import CompileError, Span

    err = io.StringIO()
    rep = Reporter("demo", verbosity, err=err)
    handler = configure_logging(rep)
    try:
        error = CompileError("expected ';', found \"let\"", Span("k/colorize.wgsl", 27, 5, "    let t = (v - params.lo);"))
        logging.getLogger("engine_plugin.assets").warning("reload of %s failed; generation %d stays live:\n%s", "colorize.computeShader", 3, error)
    finally:
        logging.getLogger("engine_plugin").removeHandler(handler)
    lines = err.getvalue().splitlines()
    head = "engine-plugin demo: reload of colorize.computeShader failed; generation 3 stays live:"
    if verbosity == 0:
        assert lines == [f"{head} k/colorize.wgsl:27:5: expected ';', found \"let\""], lines
    else:
        assert lines[0] == head and "let t = (v - params.lo);" in err.getvalue() and "^" in lines[-1], lines


@pytest.mark.parametrize("command", ["bench", "bake"])
def test_a_json_report_into_a_folder_the_system_refuses_is_refused_before_any_work(tmp_path, command):
    # As root, os.access says yes to /proc: bench --quick --json /proc/x ran every case, then
    # failed writing the report, exit 2 (review helper 228). Now a file is tried there first.
    if not os.path.isdir("/proc"):
        pytest.skip("no /proc on this system")
    shutil.copytree(os.path.join(SAMPLES, "particles.computeShader"), tmp_path / "assets" / "particles.computeShader")
    args = ["bench", "lowering", "--quick"] if command == "bench" else ["bake", "assets", "--cache", "c", "--jobs", "1"]
    done = cli(*args, "--json", "/proc/x", cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    line = one_error_line(done, command)
    assert "--json '/proc/x'" in line and "bug" not in line, line
    assert done.stdout == "" and not (tmp_path / "c").exists()  # no case ran, nothing baked
