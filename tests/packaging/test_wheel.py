"""The wheel, installed into a fresh venv and used from a folder outside the checkout: the README's
ABI snippet (on a copy of its sample), an Engine with the engine's own summary product, the demo,
a bake and a quick bench subset all work from the installed package alone.

The venv gets the wheel with ``--no-deps``; its dependencies come from this test run's own
environment through a path entry (no network, no re-install of wgpu and numpy each run). That
entry adds the folder only: the checkout's editable-install hook is never executed, and every run
checks that ``engine_plugin`` is imported from the new venv.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """(python of a venv holding only the built wheel, the venv's bin folder, a game folder outside the repo)."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    # Built from a copy without build/: setuptools reuses build/lib, so a wheel built in the
    # tree ships modules and data files deleted since, and this test could pass on them.
    source = base / "source"
    top_level = {"build", "dist", ".venv", ".git", "cache", "out", ".pytest_cache"}  # engine_plugin/cache is a package

    def skip(folder: str, names: list[str]) -> set[str]:
        here = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        return here | (top_level & set(names) if os.path.samefile(folder, REPO) else set())

    shutil.copytree(REPO, source, ignore=skip)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(dist), str(source)], capture_output=True, text=True, timeout=300, cwd=str(base)
    )
    assert build.returncode == 0, build.stderr
    (base / "build.log").write_text(build.stdout + build.stderr)  # the backend's warnings: see the test below
    (wheel,) = glob.glob(str(dist / "engine_plugin-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # The dependencies: this environment's site-packages, as a plain path (its .pth hooks stay off).
    with open(os.path.join(site, "zz_test_deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel], capture_output=True, text=True, timeout=300
    )
    assert inst.returncode == 0, inst.stderr
    game = base / "game"
    game.mkdir()
    where = subprocess.run([python, "-c", "import engine_plugin; print(engine_plugin.__file__)"], cwd=str(game), capture_output=True, text=True, check=True)
    assert where.stdout.strip().startswith(site), f"engine_plugin imported from {where.stdout} instead of the venv"
    return python, str(venv / "bin"), game


def _run(cmd: list[str], cwd, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH="", DISPLAY="")
    env.pop("PYTHONPATH")
    done = subprocess.run(cmd, cwd=str(cwd), capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{cmd}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done


def test_the_wheel_builds_without_a_packaging_warning(installed):
    """setuptools warned that the kernel folders (data, no __init__.py) were importable packages
    absent from its configuration, which a future setuptools would leave out of the wheel."""
    log = os.path.join(os.path.dirname(str(installed[2])), "build.log")  # the fixture wrote it beside the game folder
    with open(log) as f:
        text = f.read()
    assert "BuildBackendWarning" not in text and "is absent from the `packages` configuration" not in text, text[-3000:]


def test_the_readme_abi_snippet_runs_on_the_installed_package(installed):
    python, _, game = installed
    shutil.copytree(os.path.join(REPO, "assets", "samples"), game / "assets" / "samples", dirs_exist_ok=True)
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    done = _run([python, "-c", snippet], game)
    assert "float32" in done.stdout or "[" in done.stdout


def test_an_engine_registers_the_engines_own_summary_kernel_whatever_the_library_root(installed):
    python, _, game = installed
    code = """
import numpy as np
from engine_plugin.assets import AssetLibrary
from engine_plugin.engine import Engine, fallbacks
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

world = World((32, 32), {"height": np.float32}, max_chunks=4)
for key in range(4):
    world.add(key)
applied = []
engine = Engine(world, AssetLibrary("assets", "cache"))
engine.register_product("engine/summary.computeShader", spec={"T": "f32"}, fields={"src": "height"},
                        policy=ReadbackPolicy.SUMMARY, apply=lambda r: applied.append(r), cpu_fallback=fallbacks.summary)
world.write(3, "height", np.full((32, 32), 2.0, np.float32))
import time
deadline = time.monotonic() + 60  # readbacks complete asynchronously: bounded by time, not frames
while True:
    engine.frame()
    if applied or time.monotonic() > deadline:
        break
    time.sleep(0.01)
engine.close()
print("applied", len(applied))
"""
    done = _run([python, "-c", code], game)
    assert "applied 0" not in done.stdout and "applied" in done.stdout


def test_the_installed_command_runs_demo_bake_and_a_quick_bench(installed):
    python, bindir, game = installed
    exe = os.path.join(bindir, "engine-plugin")
    version = _run([exe, "--version"], game)
    meta = _run(
        [
            python,
            "-c",
            "import engine_plugin, importlib.metadata as m; d = m.metadata('engine_plugin'); print(m.version('engine_plugin'), engine_plugin.__version__, d['License-Expression'])",
        ],
        game,
    )
    installed_version, package_version, license_ = meta.stdout.split()
    assert installed_version == package_version and license_ == "MIT"  # one source for the version
    assert version.stdout.strip() == f"engine-plugin {package_version}"
    typed = _run([python, "-c", "import engine_plugin, os; print(os.path.exists(os.path.join(os.path.dirname(engine_plugin.__file__), 'py.typed')))"], game)
    assert typed.stdout.strip() == "True"
    _run([exe, "demo", "--headless", "--frames", "5", "--cache", "cache"], game)
    assert (game / "out" / "demo.png").stat().st_size > 1000
    baked = _run([exe, "bake", "--builtin", "--cache", "cache", "--jobs", "1", "--json", "-"], game)
    import json

    report = json.loads(baked.stdout)
    assert report["ok"] and report["totals"]["variants"] >= 12
    # A subset of the quick bench (the full quick run takes minutes): the cases that read the
    # packaged kernels and scripts, and the engine frame over the packaged summary kernel.
    _run([python, "-m", "engine_plugin", "bench", "lowering", "engine_frame", "warm_start", "--quick"], game, timeout=600)
