"""The device's poll thread never waits inside the driver for the GPU while only the frame loop
and the engine's readback waiter are about (on the H200 wgpu-py's own poll thread did, holding
the device, and every ``frame()`` waited there for the whole of the GPU's work: 35 ms frames
under 38 ms of work). A thread blocked on a result (``abi.read``) still gets the driver wait,
which answers soonest. Observed at the driver boundary: every ``wgpuDevicePoll`` call and its
``wait`` flag, on lavapipe."""

from __future__ import annotations

import threading
import time

import numpy as np

from engine_plugin import abi

import pacing_support as ps


class _PollLog:
    """Wraps a device's poll function: records each call's ``wait`` flag."""

    def __init__(self, device) -> None:
        self.poller = device._poller
        self.original = self.poller._poll_func
        self.waits: list[bool] = []
        self.lock = threading.Lock()

        def logged(block):
            with self.lock:
                self.waits.append(bool(block))
            return self.original(block)

        self.poller._poll_func = logged

    def take(self) -> list[bool]:
        with self.lock:
            out, self.waits = self.waits, []
        return out

    def restore(self) -> None:
        self.poller._poll_func = self.original


def test_frames_with_readbacks_in_flight_never_make_the_poller_wait_in_the_driver(gpu):
    world, engine, applied = ps.make(device=gpu, reps=150)  # GPU work outlasts a 60 fps frame
    log = _PollLog(gpu.device)
    try:
        engine.invalidate()
        frames = ps.frame_times(world, engine, frames=40)
        for _ in range(400):  # then let the last results land, frames still running
            if applied and engine.idle:
                break
            engine.frame()
            threading.Event().wait(0.005)
        polls = log.take()
        assert applied, "readbacks must still be applied (the poller's quick polls resolve them)"
        assert polls, "the poller must have polled"
        assert True not in polls, f"{polls.count(True)} of {len(polls)} polls waited inside the driver while only frames ran"
        assert len(frames) == 40
    finally:
        log.restore()
        engine.close()


def test_a_read_blocked_on_its_result_lets_the_poller_wait_in_the_driver(gpu):
    heavy = ps.heavy_program().variant()
    src = np.arange(64 * 1024, dtype=np.float32)
    log = _PollLog(gpu.device)
    try:
        run = heavy.run(64, inputs={"chunks": np.arange(64, dtype=np.uint32), "src": src}, params={"tile_count": 1024, "reps": 150 * _gpu_scale()})
        log.take()
        got = abi.read(run.outputs["out"])  # the GPU is busy for milliseconds: the read blocks
        polls = log.take()
        assert got.shape == (64,) and got.any()
        assert True in polls, f"no driver wait among {len(polls)} polls while a read waited"
    finally:
        log.restore()


def _heavy_run(ctx=None):
    """Heavy GPU work (tens of ms on lavapipe) on ``ctx``'s device (default: the process's)."""
    kwargs = {} if ctx is None else {"device": ctx}
    program = abi.program(key="pacing/heavy" if ctx is None else "pacing/heavy@other", schema=abi.parse(ps.HEAVY_YAML, "pacing/heavy/bindings.yaml"),
                          wgsl=ps.HEAVY_WGSL, wgsl_path="pacing/heavy/kernel.wgsl", **kwargs)
    return program.variant().run(64, inputs={"chunks": np.arange(64, dtype=np.uint32), "src": np.arange(64 * 1024, dtype=np.float32)},
                                 params={"tile_count": 1024, "reps": 150 * _gpu_scale(ctx)})


def _map_of(ctx, buffer):
    """A map of ``buffer``'s first 256 bytes, copied after the work submitted before it."""
    import wgpu

    from engine_plugin.device.mapping import map_submitted

    staging = ctx.device.create_buffer(size=256, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    encoder = ctx.device.create_command_encoder()
    encoder.copy_buffer_to_buffer(buffer, 0, staging, 0, 256)
    ctx.queue.submit([encoder.finish()])
    return map_submitted(staging, 256), staging


def _gpu_scale(ctx=None) -> int:
    """How many times the heavy work's loops run on this adapter: "tens of ms on lavapipe" was
    under a millisecond on the H200 (its dispatch ended inside a 0.3 ms spin, and these tests
    saw no pending work there); a GPU gets 40 times the loops, a few milliseconds."""
    from engine_plugin.device.context import get_context

    ctx = ctx or get_context()
    info = dict(ctx.adapter.info) if ctx.adapter is not None else {}
    return 1 if str(info.get("adapter_type", "")) == "CPU" else 40


HEAVY_RAW = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var h = gid.x;
    for (var r = 0u; r < ROUNDSu; r = r + 1u) {
        for (var t = 0u; t < 64u; t = t + 1u) { h = (h ^ t) * 16777619u; h = h ^ (h >> 13u); }
    }
    out[gid.x] = h;
}
"""


def _pending_map(device):
    """Heavy work and the copy of its result in one submission, then the map: on lavapipe too
    (whose submit waits for the previous submission only) the map stays pending while it runs."""
    import wgpu

    from engine_plugin.device.mapping import map_submitted

    out = device.create_buffer(size=4096 * 4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    staging = device.create_buffer(size=4096 * 4, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    pipeline = _pipelines.get(id(device))
    if pipeline is None:  # compiled once a device: the first compile outlasts the work
        rounds = 900 * (1 if "CPU" in str(dict(device.adapter.info).get("adapter_type", "")) else 40)
        module = device.create_shader_module(code=HEAVY_RAW.replace("ROUNDS", str(rounds)))
        pipeline = _pipelines[id(device)] = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": out}}])
    encoder = device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, group)
    cpass.dispatch_workgroups(64)
    cpass.end()
    encoder.copy_buffer_to_buffer(out, 0, staging, 0, 4096 * 4)
    device.queue.submit([encoder.finish()])
    return map_submitted(staging, 4096 * 4), staging


_pipelines: dict = {}


def test_a_read_blocked_on_one_device_never_makes_another_devices_poller_wait_in_its_driver(gpu):
    # The waiter count was process-wide: an abi.read on any device brought the driver waits
    # back to the engine's device (review helper 119).
    from engine_plugin.device.context import fresh_context
    from engine_plugin.device.mapping import settled

    other = fresh_context(avoid=gpu)
    assert other.device is not gpu.device
    for ctx in (other, gpu):  # compiled, and the devices idle
        assert settled(_pending_map(ctx.device)[0], 30.0, urgent=True)
    log = _PollLog(other.device)
    try:
        promise, _staging = _pending_map(other.device)  # pending there for tens of ms, nobody waiting for it
        mine, _mine_staging = _pending_map(gpu.device)
        assert settled(mine, 30.0, urgent=True)  # blocks on the default device meanwhile
        assert settled(promise, 30.0)
        polls = log.take()
        assert polls and True not in polls, f"{polls.count(True)} of {len(polls)} polls of the other device waited in its driver"
    finally:
        log.restore()


def test_a_poll_that_raises_leaves_the_poller_polling_and_the_read_arrives(gpu, caplog):
    # One exception out of the poll function ended the thread: every later map of the device
    # waited for good (review helper 119).
    import logging

    poller = gpu.device._poller
    real, failed = poller._poll_func, []

    def once_broken(block):
        if not failed:
            failed.append(block)
            raise RuntimeError("injected poll failure")
        return real(block)

    poller._poll_func = once_broken
    try:
        with caplog.at_level(logging.WARNING, logger="engine_plugin.gpu"):
            got = abi.read(_heavy_run().outputs["out"])
        assert failed and got.any() and poller.is_alive()
        assert "injected poll failure" in caplog.text
    finally:
        poller._poll_func = real


def test_a_callers_device_with_a_map_in_flight_gets_the_poller_and_the_map_still_settles(gpu):
    # Install stopped wgpu's poll thread, dropping the tokens of maps in flight: such a map
    # never settled (review helper 119); a device with one pending kept wgpu's thread for good.
    from engine_plugin.device.context import DeviceContext
    from engine_plugin.device.mapping import settled
    from engine_plugin.device.poller import FramePoller

    device = gpu.adapter.request_device_sync()  # the caller's own: wgpu's poll thread
    assert not isinstance(device._poller, FramePoller)
    import wgpu

    data = device.create_buffer_with_data(data=np.arange(64, dtype=np.uint32), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    theirs = type("Ctx", (), {"device": device, "queue": device.queue})()
    promise, staging = _map_of(theirs, data)
    old = device._poller
    ctx = DeviceContext(device)
    assert isinstance(device._poller, FramePoller) and ctx.device is device
    assert settled(promise, 30.0), "the map in flight at install never settled"
    promise.sync_wait()
    assert np.frombuffer(staging.read_mapped(0, 256), np.uint32)[:64].tolist() == list(range(64))
    staging.unmap()
    old.join(timeout=5.0)  # its map done, wgpu's thread ends (it lived on, holding the device: helper 121)
    assert not old.is_alive()
    device.destroy()


def test_a_read_polls_the_device_itself_before_it_hands_the_wait_to_the_poll_thread(gpu, monkeypatch):
    # A one-shot read woke the poll thread and was woken back by it: two thread handoffs,
    # about 100 µs of a 450 µs one-shot on lavapipe's host. The reading thread polls first.
    from engine_plugin.device import poller as poller_module
    from engine_plugin.runtime import output as output_module

    monkeypatch.setattr(poller_module, "SPIN_S", 30.0, raising=False)  # long enough for any light read on a loaded host
    monkeypatch.setattr(output_module, "_READ_POLL_S", 30.0)
    from engine_plugin.bench.axpy import AXPY_WGSL, AXPY_YAML

    axpy = abi.program(key="poller/axpy", schema=abi.parse(AXPY_YAML, "poller/axpy/bindings.yaml"), wgsl=AXPY_WGSL).variant()
    xs = np.arange(1024, dtype=np.float32)
    abi.read(axpy.run(1024, inputs={"x": xs}, params={"a": 2.0}).outputs["y"])  # compiled, pooled, the GPU idle
    reader = threading.get_ident()
    threads: list[tuple[int, bool]] = []
    poller = gpu.device._poller
    original = poller._poll_func

    def logged(block):
        threads.append((threading.get_ident(), bool(block)))
        return original(block)

    poller._poll_func = logged
    try:
        for k in range(20):
            got = abi.read(axpy.run(1024, inputs={"x": xs + k}, params={"a": 2.0}).outputs["y"])
            assert np.array_equal(got, 2.0 * (xs + k) + 1.0), "the read must answer this run's numbers"
    finally:
        poller._poll_func = original
    mine = [wait for ident, wait in threads if ident == reader]
    assert mine, "the reading thread never polled the device: it handed every wait to the poll thread"
    assert True not in [wait for _, wait in threads], "a light read spun long enough must not make anyone wait in the driver"


def test_a_spin_gives_up_at_its_limit_and_the_long_wait_still_arrives(gpu):
    from engine_plugin.device.mapping import settled
    from engine_plugin.device.poller import spin_until

    assert settled(_pending_map(gpu.device)[0], 30.0, urgent=True)  # compiled, the GPU idle
    promise, staging = _pending_map(gpu.device)  # tens of ms on lavapipe, more than 1 ms anywhere
    log = _PollLog(gpu.device)
    try:
        t0 = time.perf_counter()
        done = spin_until(promise._thread_event, gpu.device._poller, 0.001)
        spent = time.perf_counter() - t0
        polls = log.take()
    finally:
        log.restore()
    assert not done and spent < 0.5, f"a 1 ms spin took {spent * 1e3:.1f} ms (or found heavy work done)"
    assert polls and True not in polls, "a spin never waits inside the driver"
    assert settled(promise, 30.0, urgent=True)
    promise.sync_wait()
    staging.unmap()



def test_a_signal_during_a_spin_on_the_main_thread_is_handled_after_it(gpu):
    # A read's own thread runs the map callbacks its polls find; on the main thread Ctrl-C's
    # KeyboardInterrupt could land inside one, where cffi swallows it: when it landed before
    # the promise was given its result, the read waited for good (review helper 122: hung in
    # 9-16 interrupted reads). The spin holds Python signal handlers back until it is over.
    import os
    import signal

    from engine_plugin.device.poller import spin_until

    assert threading.current_thread() is threading.main_thread()
    handled: list[float] = []

    def handler(signum, frame):
        handled.append(time.perf_counter())

    previous = signal.signal(signal.SIGUSR1, handler)
    held = signal.signal(signal.SIGINT, handler)
    try:
        never = threading.Event()
        threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.perf_counter()
        done = spin_until(never, gpu.device._poller, 0.2)
        assert not done
        for _ in range(100):  # a handler runs at the main thread's next bytecodes
            if handled:
                break
            time.sleep(0.001)
        assert len(handled) == 1, "the signal must be handled exactly once"
        assert handled[0] - started >= 0.19, f"the handler ran {handled[0] - started:.3f} s into a 0.2 s spin, where a map callback may be running"
        assert signal.getsignal(signal.SIGINT) is handler, "the spin must put the handler back"
    finally:
        signal.signal(signal.SIGINT, held)
        signal.signal(signal.SIGUSR1, previous)
