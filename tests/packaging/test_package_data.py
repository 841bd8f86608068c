"""Kernels are package data found through importlib.resources; the bench measures the sample's kernel."""

from __future__ import annotations

import filecmp
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_bench_kernel_is_the_reference_sample_byte_for_byte():
    from engine_plugin.bench.harness import bench_kernels

    ours = os.path.join(bench_kernels(), "reference.computeShader")
    sample = os.path.join(REPO, "assets", "samples", "reference.computeShader")
    match, mismatch, errors = filecmp.cmpfiles(ours, sample, ["bindings.yaml", "kernel.wgsl"], shallow=False)
    assert mismatch == [] and errors == [], "copy assets/samples/reference.computeShader to engine_plugin/bench/kernels/ (published bench results use it)"


def test_a_library_over_any_root_finds_the_engine_kernels_but_a_root_copy_wins(tmp_path, gpu):
    from engine_plugin.assets import AssetLibrary
    from engine_plugin.engine import kernel_folder

    lib = AssetLibrary(str(tmp_path / "nowhere"), None, device=gpu)
    ref = lib.load("engine/summary.computeShader")
    assert ref.folder == kernel_folder("summary") and ref.error is None
    own = tmp_path / "mine" / "engine" / "summary.computeShader"
    own.mkdir(parents=True)
    for name in ("bindings.yaml", "kernel.wgsl"):
        (own / name).write_bytes(open(os.path.join(kernel_folder("summary"), name), "rb").read())
    mine = AssetLibrary(str(tmp_path / "mine"), None, device=gpu).load("engine/summary.computeShader")
    assert mine.folder == str(own)


def test_the_library_and_the_plain_commands_work_without_any_extra(tmp_path):
    """No rich, glfw, rendercanvas, pillow nor dask: the library bakes and the commands that need
    none of them (lower, info --json, bake -q) still run."""
    import subprocess
    import sys

    hide = "import sys\nfor m in ('rich', 'glfw', 'rendercanvas', 'PIL', 'distributed', 'dask'):\n    sys.modules[m] = None\n"
    code = hide + (
        "import engine_plugin.abi, engine_plugin.engine, engine_plugin.assets.library, engine_plugin.world\n"
        "from engine_plugin.bake import bake\n"
        f"report = bake([{os.path.join(REPO, 'assets', 'samples', 'particles.computeShader')!r}], {str(tmp_path / 'c')!r})\n"
        "assert report.ok and report.totals['baked'] == 1, report.totals\n"
        "from engine_plugin.cli import main\n"
        "assert main(['lower', 'assets/samples/reference.computeShader', '--spec', 'T=f32', '--spec', 'FOLD=add']) == 0\n"
        "assert main(['info', 'assets/samples', '--json']) == 0\n"
        f"assert main(['-q', 'bake', 'assets/samples', '--cache', {str(tmp_path / 'c2')!r}, '--jobs', '1']) == 0\n"
        # README: without [cli] "pass --json or -q" (review helper 195: bake --json and bench
        # --json / -q were refused, exit 2, the report not written).
        f"assert main(['bake', 'assets/samples', '--cache', {str(tmp_path / 'c3')!r}, '--jobs', '1', '--json', {str(tmp_path / 'b.json')!r}]) == 0\n"
        f"assert main(['bench', 'a', '--quick', '--json', {str(tmp_path / 'bench.json')!r}]) == 0\n"
        "assert main(['-q', 'bench', 'a', '--quick']) == 0\n"
        f"assert main(['bench', 'a', '--quick', '--js', {str(tmp_path / 'bench2.json')!r}]) == 0\n"  # argparse's abbreviation (review helper 198)
        "assert main(['bench', 'a', '--quick']) == 2\n"  # a table asked for: the extra is named
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import json

    assert json.load(open(tmp_path / "b.json"))["ok"] and json.load(open(tmp_path / "bench.json"))["results"]
    assert "baked" in done.stdout and "adapter:" in done.stdout  # the plain lines, no table
    assert "bench: the tables (or pass --json PATH or -q) needs the optional 'cli' extra" in done.stderr, done.stderr


def _zipped_package(folder) -> str:
    """The package as one zip archive in ``folder`` (a zipapp or zipimport deployment)."""
    import zipfile

    archive = folder / "engine_plugin.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for root, dirs, files in os.walk(os.path.join(REPO, "engine_plugin")):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                path = os.path.join(root, name)
                z.write(path, os.path.relpath(path, REPO))
    return str(archive)


def test_the_shipped_kernels_are_found_when_the_package_is_imported_from_an_archive(tmp_path):
    # resources.as_file() extracts a folder only from Python 3.12: imported from a zip (a
    # zipapp, a zipimport deployment) on 3.11 every shipped kernel raised IsADirectoryError
    # (review helper 65).
    import subprocess
    import sys
    archive = _zipped_package(tmp_path)
    code = (
        "import engine_plugin, os\n"
        "from engine_plugin.engine import kernel_folder\n"
        "assert '.zip' in engine_plugin.__file__, engine_plugin.__file__\n"
        "print(sorted(os.listdir(kernel_folder('summary'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(archive)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['bindings.yaml', 'kernel.wgsl']"


def test_threads_loading_packaged_kernels_from_an_archive_share_one_extraction(tmp_path):
    # Without a lock each thread extracted its own copy, and a load could take its kernel from
    # one copy and the root from another ("lies behind a symlink ... outside the asset root")
    # (review helper 66).
    import subprocess
    import sys
    archive = _zipped_package(tmp_path)
    code = (
        "import threading, tempfile\n"
        "from engine_plugin.assets import AssetLibrary\n"
        "errors = []\n"
        "def load():\n"
        "    try:\n"
        "        AssetLibrary(tempfile.mkdtemp(), None).load('engine/summary.computeShader')\n"
        "    except Exception as e:\n"
        "        errors.append(repr(e))\n"
        "threads = [threading.Thread(target=load) for _ in range(12)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(errors[:1] or 'ok')\n"
    )
    for _ in range(5):  # the race was lost in 9 of 15 processes
        proc = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(archive)}, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout[-2000:] + proc.stderr[-2000:]
