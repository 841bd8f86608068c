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
    """Runs recorded inside ``with abi.batch():`` go to the GPU in one submission at exit."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[DeviceContext, list]] = {}
        self.temps: list = []
        self._ring_use: dict[int, int] = {}

    def add(self, variant: Any, record: tuple, temps: list) -> None:
        ctx = variant.ctx
        used = self._ring_use.get(id(variant), 0) + 1
        if used >= 256:  # the params ring would wrap inside this submission: flush first
            self.flush()
            used = 1
        self._ring_use[id(variant)] = used
        self.records.setdefault(id(ctx), (ctx, []))[1].append(record)
        self.temps.extend((variant, t) for t in temps)

    def flush(self) -> None:
        for ctx, records in self.records.values():
            if records:
                submit_records(ctx, records)
        for variant, buf in self.temps:
            variant._pool.give(buf)
        self.records.clear()
        self.temps.clear()
        self._ring_use.clear()


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
