"""A saved shader the driver's compiler never finishes (lavapipe on a huge ``var<private>``
array: minutes) fails its reload after ``RELOAD_COMPILE_TIMEOUT_S``, naming it, while the game
keeps running its last good programs. The reload worker waited for that compile for good, and
every later save of any asset was silently never applied.

The scenario runs in a child process: the stuck compile goes on in the background there (the
driver holds its device meanwhile) and must not reach the rest of the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

SCENARIO = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, sys.argv[2])
    from asset_support import kernel, make_asset, run_scale, write
    import engine_plugin.assets.library as library
    from engine_plugin.assets import AssetLibrary

    library.RELOAD_COMPILE_TIMEOUT_S = 3.0
    root = sys.argv[1]
    a, b = make_asset(root, "a", 2.0), make_asset(root, "b", 3.0)
    lib = AssetLibrary(root, cache=None)
    lib.watch()
    ra, rb = lib.load("a.computeShader"), lib.load("b.computeShader")
    out = {"before": [run_scale(ra), run_scale(rb)], "events": [], "frames": 0}

    def pump(seconds, until):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for e in lib.poll():
                out["events"].append([e.asset, e.ok, "" if e.ok else str(e.error)])
            out["during"] = [run_scale(ra), run_scale(rb)]  # the game's frames go on
            out["frames"] += 1
            if until():
                return

    HOSTILE = '''var<private> big: array<f32, 4000000>;
    @compute @workgroup_size(64)
    fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
        let i = zero_index(gid);
        if (i >= zero_n()) { return; }
        big[i % 4000000u] = 1.0;
        dst_set(i, src_get(i) * T(big[(i * 7u) % 4000000u]));
    }
    '''
    write(os.path.join(b, "kernel.wgsl"), HOSTILE)
    pump(60, lambda: any(e[0] == "b.computeShader" for e in out["events"]))
    write(os.path.join(a, "kernel.wgsl"), kernel(5.0))
    pump(60, lambda: any(e[0] == "a.computeShader" for e in out["events"]))
    out["after"] = [run_scale(ra), run_scale(rb)]
    print(json.dumps(out), flush=True)
    os._exit(0)  # the stuck compile is the driver's: not waited for
    """
)


def test_a_reload_whose_compile_never_ends_fails_and_the_game_and_other_reloads_go_on(tmp_path):
    root = tmp_path / "assets"
    root.mkdir()
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", SCENARIO, str(root), HERE], capture_output=True, text=True, timeout=170, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"] == [[2.0, 4.0, 6.0, 8.0], [3.0, 6.0, 9.0, 12.0]]
    b_events = [e for e in out["events"] if e[0] == "b.computeShader"]
    assert b_events and not b_events[0][1], out["events"]
    assert "b.computeShader/kernel.wgsl" in b_events[0][2] and "did not finish within 3 s" in b_events[0][2], b_events
    assert "may be stuck on this shader" in b_events[0][2]
    # The game ran its last good programs throughout, b's too.
    assert out["frames"] > 10 and out["during"][1] == out["before"][1] and out["after"][1] == [3.0, 6.0, 9.0, 12.0]
    # The next save of another asset is applied: compiles of other shaders go on beside the stuck
    # one (they waited on one lock per device, review helper 141).
    a_events = [e for e in out["events"] if e[0] == "a.computeShader"]
    assert a_events and a_events[0][1], out["events"]
    assert out["after"][0] == [5.0, 10.0, 15.0, 20.0]


@pytest.fixture(autouse=True)
def short_reload_deadline(monkeypatch):
    import engine_plugin.assets.library as library

    monkeypatch.setattr(library, "RELOAD_COMPILE_TIMEOUT_S", 1.5)


@pytest.fixture
def one_asset(tmp_path):
    """A library over one asset ``a`` (scale 2), its folder and its loaded reference."""
    from asset_support import make_asset, run_scale

    from engine_plugin.assets import AssetLibrary

    folder = make_asset(str(tmp_path / "assets"), "a", 2.0)
    lib = AssetLibrary(str(tmp_path / "assets"), cache=None)
    ref = lib.load("a.computeShader")
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]
    yield lib, folder, ref
    lib.close()


def _pump(lib, seconds, until):
    import time

    events, end = [], time.monotonic() + seconds
    while time.monotonic() < end and not until(events):
        events += lib.poll()
        time.sleep(0.02)
    return events


def test_a_reload_whose_compile_finishes_after_the_deadline_is_applied_when_it_does(one_asset, slow_compiles):
    # A legitimate compile just over the deadline failed the reload for good: the asset ran its
    # old program until the next save (review helper 141).
    from asset_support import kernel, run_scale, write

    lib, folder, ref = one_asset
    slow_compiles["7.25"] = 4.0
    write(os.path.join(folder, "kernel.wgsl"), kernel(7.25))
    lib.request_reload("a.computeShader")
    first = _pump(lib, 30, lambda evs: bool(evs))
    assert first and not first[0].ok and "did not finish within 1.5 s" in str(first[0].error)
    assert run_scale(ref) == [2.0, 4.0, 6.0, 8.0]  # the last good program meanwhile
    later = _pump(lib, 30, lambda evs: any(e.ok for e in evs))
    assert any(e.ok for e in later), later
    assert run_scale(ref) == [7.25, 14.5, 21.75, 29.0] and ref.error is None


def test_poll_reports_a_reload_s_compile_error_while_another_asset_s_compile_is_stuck(tmp_path, slow_compiles):
    # poll() compiles a failed reload again on the engine thread to report it: it waited on the
    # device's one compile lock, held by another asset's stuck compile, and the game froze for
    # the whole of it (review helper 141).
    import time

    from asset_support import kernel, make_asset, run_scale, write

    from engine_plugin.assets import AssetLibrary

    slow_compiles["9.75"] = 20.0
    root = str(tmp_path / "assets")
    a, b = make_asset(root, "a", 2.0), make_asset(root, "b", 3.0)
    lib = AssetLibrary(root, cache=None)
    try:
        ra, rb = lib.load("a.computeShader"), lib.load("b.computeShader")
        run_scale(ra), run_scale(rb)
        write(os.path.join(b, "kernel.wgsl"), kernel(9.75))
        lib.request_reload("b.computeShader")
        failed_b = _pump(lib, 30, lambda evs: bool(evs))
        assert failed_b and not failed_b[0].ok  # b's compile is still running (stuck)
        bad = kernel(2.0).replace("dst_set(i, src_get(i) * T(2.0));", "let q: u32 = 1.5;\n    dst_set(i, src_get(i) * T(2.0));")
        write(os.path.join(a, "kernel.wgsl"), bad)
        lib.request_reload("a.computeShader")
        end = time.monotonic() + 30
        events: list = []
        while time.monotonic() < end and not events:
            t0 = time.monotonic()
            events = lib.poll()
            assert time.monotonic() - t0 < 5, "poll() waited on another asset's compile"
            time.sleep(0.02)
        assert events and events[0].asset == "a.computeShader" and not events[0].ok
        assert "kernel.wgsl:6:" in str(events[0].error)
        assert run_scale(ra) == [2.0, 4.0, 6.0, 8.0] and run_scale(rb) == [3.0, 6.0, 9.0, 12.0]
    finally:
        lib.close()


def test_a_compile_finishing_as_its_reload_stops_waiting_counts_as_done(tmp_path, slow_compiles, monkeypatch):
    # The compile thread, past the end of its compile but not yet ended, was taken for still
    # compiling: the reload failed promising a retry, added to a list nobody ran (helper 142).
    import threading
    import time

    from asset_support import SCHEMA, kernel

    import engine_plugin.assets.library as library
    from engine_plugin.device.context import get_context
    from engine_plugin.lowering import lower, parse

    class PausingLock:
        """The compile thread is preempted right after its finally releases the lock."""

        def __init__(self):
            self.lock = threading.Lock()

        def __enter__(self):
            self.lock.acquire()

        def __exit__(self, *exc):
            self.lock.release()
            if threading.current_thread().name == "engine_plugin reload compile":
                time.sleep(0.5)

    monkeypatch.setattr(library, "_compiles_lock", PausingLock())
    slow_compiles["31.5"] = 1.0
    lowered = lower(parse(SCHEMA, "k/bindings.yaml"), kernel(31.5), {"T": "f32"}, wgsl_path="k/kernel.wgsl")
    retried: list = []
    done = library._compiled_within(lowered, "k", get_context(), 1.2, lambda: retried.append(1))
    time.sleep(1.0)
    assert done or retried


def test_a_reload_whose_compile_fails_after_the_deadline_reports_the_error(one_asset, slow_compiles):
    # It finished, failing: nothing was tried again or reported, and the asset's error stayed
    # the timeout's until the next save (helper 142).
    from asset_support import kernel, run_scale, write

    lib, folder, ref = one_asset
    slow_compiles["7.75"] = 3.0
    write(os.path.join(folder, "kernel.wgsl"), kernel(7.75).replace("dst_set(", "let q: u32 = 1.5;\n    dst_set("))
    lib.request_reload("a.computeShader")
    first = _pump(lib, 30, lambda evs: bool(evs))
    assert first and "did not finish within 1.5 s" in str(first[0].error)
    later = _pump(lib, 30, lambda evs: bool(evs))
    assert later and not later[0].ok and "kernel.wgsl:6:" in str(later[0].error), later
    assert "kernel.wgsl:6:" in str(ref.error) and run_scale(ref) == [2.0, 4.0, 6.0, 8.0]


def test_two_libraries_whose_reloads_joined_one_late_failing_compile_both_report_its_error(tmp_path, slow_compiles, monkeypatch):
    # The kept error was taken by the first retry: the second library compiled the failing
    # shader again and reported another timeout first (review helper 144).
    import time

    from asset_support import kernel, make_asset, write

    import engine_plugin.runtime.compile as compile_module
    from engine_plugin.assets import AssetLibrary

    compiled: list = []
    slowed = compile_module._user_lines

    def counted(lowered):
        if "7.625" in lowered.source:
            compiled.append(lowered.fingerprint)
        return slowed(lowered)

    monkeypatch.setattr(compile_module, "_user_lines", counted)

    root = str(tmp_path / "assets")
    folder = make_asset(root, "a", 2.0)
    libs = [AssetLibrary(root, cache=None), AssetLibrary(root, cache=None)]
    try:
        refs = [lib.load("a.computeShader") for lib in libs]
        slow_compiles["7.625"] = 3.0
        write(os.path.join(folder, "kernel.wgsl"), kernel(7.625).replace("dst_set(", "let q: u32 = 1.5;\n    dst_set("))
        for lib in libs:
            lib.request_reload()
        end = time.monotonic() + 30
        while time.monotonic() < end and not all("kernel.wgsl:6:" in str(ref.error) for ref in refs):
            for lib in libs:
                lib.poll()
            time.sleep(0.02)
        assert all("kernel.wgsl:6:" in str(ref.error) for ref in refs), [str(ref.error)[:80] for ref in refs]
        assert len(compiled) == 1, compiled  # one compile, its error reported to both
    finally:
        for lib in libs:
            lib.close()


def _stalled(mark: str, timeout: float = 30.0) -> None:
    """Wait until a reload's compile of a source holding ``mark`` is running."""
    import time

    import engine_plugin.assets.library as library

    end = time.monotonic() + timeout
    while not any(mark in job.lowered.source for job in list(library._compiles.values())):
        assert time.monotonic() < end, f"no compile of {mark} started"
        time.sleep(0.005)


@pytest.mark.parametrize("newer", ["fixed-save", "other-asset"])
def test_a_stalled_compile_stops_holding_back_newer_saves(tmp_path, slow_compiles, monkeypatch, newer):
    # Review helper 229: the one reload worker waited out a stalled compile (up to
    # RELOAD_COMPILE_TIMEOUT_S, 60 s) before it read the save that fixed it or any other
    # asset's save. It stops waiting once newer work is due; the stalled compile finishes in
    # the background, and the newest save wins.
    import time

    from asset_support import kernel, make_asset, run_scale, write

    import engine_plugin.assets.library as library
    from engine_plugin.assets import AssetLibrary

    monkeypatch.setattr(library, "RELOAD_COMPILE_TIMEOUT_S", 30.0)
    slow_compiles["3.5"] = 4.0
    root = str(tmp_path / "assets")
    a, b = make_asset(root, "a", 2.0), make_asset(root, "b", 3.0)
    lib = AssetLibrary(root, cache=None)
    try:
        ra, rb = lib.load("a.computeShader"), lib.load("b.computeShader")
        run_scale(ra), run_scale(rb)
        write(os.path.join(a, "kernel.wgsl"), kernel(3.5))
        lib.request_reload("a.computeShader")
        _stalled("3.5")
        t0 = time.monotonic()
        if newer == "fixed-save":
            write(os.path.join(a, "kernel.wgsl"), kernel(4.0))
            lib.request_reload("a.computeShader")
            _pump(lib, 30, lambda evs: run_scale(ra) == [4.0, 8.0, 12.0, 16.0])
        else:
            write(os.path.join(b, "kernel.wgsl"), kernel(5.0))
            lib.request_reload("b.computeShader")
            _pump(lib, 30, lambda evs: run_scale(rb) == [5.0, 10.0, 15.0, 20.0])
        took = time.monotonic() - t0
        assert took < 2.0, f"the newer save landed after {took:.1f} s, behind the stalled compile"
        # The stalled compile finishes: the newest save of a stays (the stalled one, had
        # nothing superseded it, is applied then).
        _pump(lib, 30, lambda evs: not library._compiles and lib.idle and run_scale(ra)[0] != 2.0)
        events = _pump(lib, 0.3, lambda evs: False)
        assert all(e.ok for e in events), [e.describe() for e in events]
        assert run_scale(ra) == ([4.0, 8.0, 12.0, 16.0] if newer == "fixed-save" else [3.5, 7.0, 10.5, 14.0])
        assert ra.error is None and rb.error is None
    finally:
        lib.close()
