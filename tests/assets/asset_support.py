"""Shared pieces of the asset tests: a small asset on a temp folder, editor save patterns,
and polling with deadlines (never fixed sleeps: the CI machine is a loaded 2-core box)."""

from __future__ import annotations

import os
import time

import numpy as np

from engine_plugin import abi

SCHEMA = """bindings:
  - { name: src, kind: buffer, access: read, element: T }
  - { name: dst, kind: buffer, access: read_write, element: T, count: "len(src)" }
specialize:
  - { name: T, options: [f32, i32, u32] }
"""
# A schema whose plan differs (a param): loads with KERNEL_WITH_GAIN.
SCHEMA_WITH_GAIN = (
    SCHEMA
    + """params:
  - { name: gain, type: f32 }
"""
)
KERNEL = """// dst = src * SCALE
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * T(SCALE));
}
"""
KERNEL_WITH_GAIN = KERNEL.replace("T(SCALE)", "T(SCALE * params.gain)")
KERNEL_LINE_OF_SCALE = 6
QUIET = 0.05  # the save-pattern tests' quiet window (the default is 30 ms)


def kernel(scale: float | str) -> str:
    return KERNEL.replace("SCALE", str(scale) if isinstance(scale, str) else f"{float(scale)!r}")


def make_asset(root: str, name: str = "k", scale: float = 2.0, schema: str = SCHEMA) -> str:
    folder = os.path.join(root, f"{name}.computeShader")
    os.makedirs(folder, exist_ok=True)
    write(os.path.join(folder, "bindings.yaml"), schema)
    write(os.path.join(folder, "kernel.wgsl"), kernel(scale))
    # Files copied in with old mtimes settle at once; fresh ones a quiet window later.
    return folder


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def run_scale(ref, values=(1.0, 2.0, 3.0, 4.0), T: str = "f32") -> list:
    """Dispatch the live program of ``ref`` and read the result back."""
    dtype = {"f32": np.float32, "i32": np.int32, "u32": np.uint32}[T]
    x = np.asarray(values, dtype=dtype)
    out = ref.program().variant({"T": T}).run(n=len(x), inputs={"src": x})
    return abi.read(out.outputs["dst"]).tolist()


def pump(lib, until, timeout: float = 10.0, what: str = "the condition") -> list:
    """Poll ``lib`` (as the engine loop would) until ``until()`` holds; answers the results."""
    results = []
    deadline = time.monotonic() + timeout
    while True:
        results += lib.poll()
        if until():
            return results
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; results so far: {[r.describe() for r in results]}")
        time.sleep(0.002)


def settle(lib, seconds: float) -> list:
    """Keep polling for ``seconds`` (after the expected reload) to catch any extra ones;
    also waits until the worker has nothing pending."""
    results = []
    end = time.monotonic() + seconds
    while time.monotonic() < end or not lib.idle:
        results += lib.poll()
        time.sleep(0.003)
        if time.monotonic() > end + 10:
            break
    results += lib.poll()
    return results


def wait_watching(lib, folder: str, timeout: float = 5.0) -> None:
    """Block until the observer delivers events for ``folder`` (its inotify watches are up)."""
    probe = os.path.join(folder, ".probe.swp")  # editor noise: never a reload
    before = lib.service.events_seen
    deadline = time.monotonic() + timeout
    seen = [0]
    orig = lib.service.notify_path

    def spy(path):
        if path.endswith(".probe.swp"):
            seen[0] += 1
        return orig(path)

    lib.service.notify_path = spy
    try:
        while not seen[0]:
            write(probe, "x")
            if time.monotonic() > deadline:
                raise AssertionError("the watchdog observer delivered no event")
            time.sleep(0.01)
    finally:
        lib.service.notify_path = orig
        os.unlink(probe)
    assert lib.service.events_seen == before
