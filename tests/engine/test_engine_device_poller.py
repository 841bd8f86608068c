"""The device's poll thread never waits inside the driver for the GPU while only the frame loop
and the engine's readback waiter are about (on the H200 wgpu-py's own poll thread did, holding
the device, and every ``frame()`` waited there for the whole of the GPU's work: 35 ms frames
under 38 ms of work). A thread blocked on a result (``abi.read``) still gets the driver wait,
which answers soonest. Observed at the driver boundary: every ``wgpuDevicePoll`` call and its
``wait`` flag, on lavapipe."""

from __future__ import annotations

import threading

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
        run = heavy.run(64, inputs={"chunks": np.arange(64, dtype=np.uint32), "src": src}, params={"tile_count": 1024, "reps": 150})
        log.take()
        got = abi.read(run.outputs["out"])  # the GPU is busy for milliseconds: the read blocks
        polls = log.take()
        assert got.shape == (64,) and got.any()
        assert True in polls, f"no driver wait among {len(polls)} polls while a read waited"
    finally:
        log.restore()
