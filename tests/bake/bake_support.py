"""Shared pieces of the bake tests: asset trees in a temporary folder, the CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.path.join(REPO, "assets", "samples")
SAMPLE_VARIANTS = 26  # reference: 5 types x 5 folds; particles: 1

# A kernel with a typo on line 5, column 29 (`heigth`): every variant fails to compile.
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
# A schema with an unknown kind on line 2.
BAD_SCHEMA_YAML = "bindings:\n  - { name: src, kind: bufer }\n"


def write_asset(folder: str, yaml_text: str, wgsl_text: str, wgsl_name: str = "kernel.wgsl") -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "bindings.yaml"), "w") as f:
        f.write(yaml_text)
    with open(os.path.join(folder, wgsl_name), "w") as f:
        f.write(wgsl_text)
    return folder


def copy_samples(dest: str) -> str:
    shutil.copytree(SAMPLES, dest)
    return dest


def cli_env() -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1", COLUMNS="160")
    return env


def run_bake(args: list[str], cwd: str, timeout: float = 120.0, prelude: str | None = None) -> subprocess.CompletedProcess:
    """``engine-plugin bake ARGS`` in a subprocess (``prelude``: Python run before main)."""
    if prelude is None:
        cmd = [sys.executable, "-m", "engine_plugin.cli", "bake", *args]
    else:
        code = f"{prelude}\nimport sys\nfrom engine_plugin.cli import main\nsys.exit(main(['bake', *sys.argv[1:]]))"
        cmd = [sys.executable, "-c", code, *args]
    return subprocess.run(cmd, cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=timeout)


def entries(folder: str) -> dict[str, bytes]:
    """{file name: bytes} of the cache entries in ``folder``."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".msgpack") and name != "usage.msgpack":
            with open(os.path.join(folder, name), "rb") as f:
                out[name] = f.read()
    return out


def load_report(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
