"""Whole-world upload split into its parts, for A/B runs of two checkouts on one machine.

Prints, over 5 rounds of 40: ``engine.upload()`` host time against raw's two ``write_buffer``
calls of the same 4 MiB mirrors, the engine's own write calls against raw's, and the engine's
host time with its writes made no-ops (its bookkeeping alone). Run from a checkout on the
device machine: ``PYTHONPATH=. python3 tools/bench/upload_split.py``.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import wgpu

from engine_plugin.bench import engine_cases, frame_cases
from engine_plugin.device.context import get_context


class TimedQueue:
    """The backend's queue, its writes timed (or skipped while ``skip``)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.times: list[float] = []
        self.skip = False

    def write_buffer(self, *args: Any) -> None:
        if self.skip:
            return
        t0 = time.perf_counter()
        self.queue.write_buffer(*args)
        self.times.append(time.perf_counter() - t0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)


def main() -> None:
    ctx = get_context()
    world = engine_cases.make_world()
    engine, _, _ = frame_cases.make_engine(world, ctx)
    engine.frame()
    usage = wgpu.BufferUsage
    raw = {n: ctx.device.create_buffer(size=1024 * 1024 * 4, usage=usage.STORAGE | usage.COPY_DST) for n in ("height", "moisture")}
    probe = ctx.device.create_buffer(size=4, usage=usage.COPY_SRC | usage.COPY_DST)
    mirrors = {n: world.mirror(n) for n in raw}
    queue = TimedQueue(engine.backend.queue)
    engine.backend.queue = queue

    def us(values: list[float]) -> float:
        return statistics.median(values) * 1e6

    gc.disable()
    for _ in range(5):
        eng: list[float] = []
        rawt: list[float] = []
        raw_writes: list[float] = []
        bookkeeping: list[float] = []
        queue.times.clear()
        for _ in range(40):
            world.mark_dirty()
            t0 = time.perf_counter()
            engine.upload()
            eng.append(time.perf_counter() - t0)
            ctx.queue.read_buffer(probe, 0, 4)
            t0 = time.perf_counter()
            for name, buf in raw.items():
                t1 = time.perf_counter()
                ctx.queue.write_buffer(buf, 0, mirrors[name])
                raw_writes.append(time.perf_counter() - t1)
            rawt.append(time.perf_counter() - t0)
            ctx.queue.read_buffer(probe, 0, 4)
            queue.skip = True
            world.mark_dirty()
            t0 = time.perf_counter()
            engine.upload()
            bookkeeping.append(time.perf_counter() - t0)
            queue.skip = False
        print(
            f"engine {us(eng):.0f} raw {us(rawt):.0f} gap {us(eng) - us(rawt):.0f} µs | "
            f"engine write {us(queue.times):.0f} raw write {us(raw_writes):.0f} | engine with no-op writes {us(bookkeeping):.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
