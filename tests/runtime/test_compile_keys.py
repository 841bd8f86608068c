"""Compiles hold one key each, not the device: a compile the driver never finishes no longer
holds every other compile behind it, and whatever ends a compile frees its key (review helpers
141 and 142)."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

import engine_plugin.runtime.compile as compile_module
from engine_plugin import abi
from engine_plugin.device.context import get_context
from engine_plugin.errors import CompileError
from engine_plugin.lowering import lower, parse

pytestmark = pytest.mark.gpu

SCHEMA = 'bindings:\n  - { name: src, kind: buffer, access: read, element: f32 }\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }\n'


def _body(scale: float, broken: bool = False) -> str:
    bad = "    let q: u32 = 1.5;\n" if broken else ""
    return (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n"
        f"    if (i >= zero_n()) {{ return; }}\n{bad}    dst_set(i, src_get(i) * {scale!r});\n}}\n"
    )


def test_other_shaders_compile_and_run_while_one_compile_is_stuck(slow_compiles):
    slow_compiles["13.25"] = 8.0
    stuck = threading.Thread(target=lambda: abi.program(key="t/keys/stuck", schema=abi.parse(SCHEMA), wgsl=_body(13.25)).variant(), daemon=True)
    stuck.start()
    time.sleep(0.5)  # inside its compile
    t0 = time.monotonic()
    x = np.arange(8, dtype=np.float32)
    for k in range(3):
        variant = abi.program(key=f"t/keys/other{k}", schema=abi.parse(SCHEMA), wgsl=_body(k + 0.5)).variant()
        np.testing.assert_array_equal(abi.read(variant.run(n=8, inputs={"src": x}).outputs["dst"]), x * np.float32(k + 0.5))
    assert time.monotonic() - t0 < 5, "the other compiles waited for the stuck one"
    assert stuck.is_alive()


class _Interrupted(BaseException):
    pass


def test_an_interrupt_while_a_failed_compile_frees_its_key_leaves_no_waiter_behind(slow_compiles):
    """Ctrl-C landing as the compiling thread re-took the device lock to free its key left the
    key taken and its event unset: every later compile of it waited for good (helper 142)."""
    ctx = get_context()
    slow_compiles["41.5"] = 1.0
    lowered = lower(parse(SCHEMA, "k/bindings.yaml"), _body(41.5, broken=True), {}, wgsl_path="k/kernel.wgsl")

    def interrupt(signum, frame):
        raise _Interrupted()

    old = signal.signal(signal.SIGALRM, interrupt)

    def hold_the_lock():
        time.sleep(0.8)
        with ctx.lock:  # the compile ends at 1.0 s and waits here for the lock
            time.sleep(0.7)

    try:
        threading.Thread(target=hold_the_lock, daemon=True).start()
        signal.setitimer(signal.ITIMER_REAL, 1.2)  # the interrupt, while it waits
        with pytest.raises((_Interrupted, CompileError)):
            compile_module.compile_lowered(lowered, device=ctx)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    time.sleep(0.6)
    found = ctx.cache("compiling").get(lowered.fingerprint)
    assert found is None or found.is_set()  # nobody waits on it; the next caller takes the key
    slow_compiles.clear()
    done: list = []
    waiter = threading.Thread(target=lambda: done.append(pytest.raises(CompileError, compile_module.compile_lowered, lowered, device=ctx)), daemon=True)
    waiter.start()
    waiter.join(10)
    assert done, "a later compile of the key still waits"


def test_the_devices_compiled_variants_are_bounded_and_what_runs_keeps_its_own(monkeypatch):
    # Review helper 148: every text a live-edit session saved stayed compiled for the device's
    # life (200 saves: 201 pipelines, +65 MB). The oldest go; a variant in use holds its own.
    monkeypatch.setattr(compile_module, "COMPILED_KEPT", 4, raising=False)
    ctx = get_context()
    schema = parse(SCHEMA, "bounded/bindings.yaml")
    first = abi.program(key="t148/bounded0", schema=schema, wgsl=_body(100.5)).variant()
    for k in range(1, 10):
        abi.program(key=f"t148/bounded{k}", schema=schema, wgsl=_body(100.5 + k)).variant()
        assert len(ctx.cache("compiled")) <= 4
    assert first.compiled.key not in ctx.cache("compiled")
    got = abi.read(first.run(n=2, inputs={"src": np.ones(2, np.float32)}).outputs["dst"])
    np.testing.assert_array_equal(got, [100.5, 100.5])  # evicted from the cache, still running
