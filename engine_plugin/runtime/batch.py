"""Submitting runs: one command buffer per run by default, or many runs in one (``abi.batch()``).

A record is (pipeline, bind group, params offset, workgroups, counters to zero). Consecutive
records share one compute pass; a record that zeroes counters first closes the pass, because
``clear_buffer`` cannot sit inside one.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

from ..gpu.device import DeviceContext

__all__ = ["Batch", "batch", "current_batch", "submit_records"]

_local = threading.local()


def submit_records(ctx: DeviceContext, records: list) -> None:
    """Encode ``records`` in order into one command buffer and submit it."""
    encoder = ctx.device.create_command_encoder()
    cpass = None
    for pipeline, bind_group, offset, groups, clears in records:
        if clears:
            if cpass is not None:
                cpass.end()
                cpass = None
            for counter in clears:
                encoder.clear_buffer(counter, 0, 16)
        if groups[0] == 0:
            continue
        if cpass is None:
            cpass = encoder.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, bind_group, [offset])
        cpass.dispatch_workgroups(*groups)
    if cpass is not None:
        cpass.end()
    ctx.queue.submit([encoder.finish()])


class Batch:
    """Runs recorded inside ``with abi.batch():`` go to the GPU in one submission at exit.

    Params are staged in each variant's ring mirror and written once per contiguous range at
    flush; a variant about to wrap its ring inside one batch flushes first, so no slot is
    overwritten before the dispatch that reads it.
    """

    def __init__(self) -> None:
        self.records: dict[int, tuple[DeviceContext, list]] = {}
        self.temps: list = []
        self._staged: dict[int, tuple[Any, list[int]]] = {}  # id(variant) -> (variant, offsets)

    def add(self, variant: Any, data: bytes, bind_group: Any, groups: tuple, clears: list, temps: list) -> None:
        ring = variant._ring
        staged = self._staged.get(id(variant))
        if staged is not None and len(staged[1]) >= ring.slots - 1:
            self.flush()
            staged = None
        if staged is None:
            staged = self._staged[id(variant)] = (variant, [])
        offset = ring.take()
        ring.mirror[offset : offset + len(data)] = data
        staged[1].append(offset)
        self.records.setdefault(id(variant.ctx), (variant.ctx, []))[1].append((variant.compiled.pipeline, bind_group, offset, groups, clears))
        if temps:
            self.temps.extend((variant, t) for t in temps)

    def flush(self) -> None:
        for variant, offsets in self._staged.values():
            ring = variant._ring
            offsets.sort()
            start = prev = offsets[0]
            for off in offsets[1:] + [None]:
                if off is not None and off == prev + ring.stride:
                    prev = off
                    continue
                end = prev + ring.stride
                variant.ctx.queue.write_buffer(ring.buffer, start, memoryview(ring.mirror)[start:end])
                if off is not None:
                    start = prev = off
        for ctx, records in self.records.values():
            if records:
                submit_records(ctx, records)
        for variant, buf in self.temps:
            variant._pool.give(buf)
        self.records.clear()
        self.temps.clear()
        self._staged.clear()


def current_batch() -> Batch | None:
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


@contextmanager
def batch() -> Iterator[Batch]:
    """Record every ``variant.run`` inside into one submission (per device), sent at exit."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    b = Batch()
    stack.append(b)
    try:
        yield b
    finally:
        stack.pop()
        b.flush()
