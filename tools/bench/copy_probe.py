#!/usr/bin/env python3
"""Probe the device's buffer-copy bandwidth as a function of size and copies per submission
(raw wgpu-py only), to check the figure the bandwidth case reports against its reference."""

import json
import sys
import time

import wgpu

from engine_plugin.device.context import get_context
from engine_plugin.runtime.output import read_words

ctx = get_context()
U = wgpu.BufferUsage
sync_buf = ctx.device.create_buffer(size=16, usage=U.STORAGE | U.COPY_SRC)
rows = []
for mib in (64, 256, 1024):
    n = mib << 20
    a = ctx.device.create_buffer(size=n, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)
    b = ctx.device.create_buffer(size=n, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)
    for reps in (1, 10, 100):
        best = float("inf")
        for _ in range(3):
            read_words(sync_buf, 0, 4)
            t0 = time.perf_counter()
            enc = ctx.device.create_command_encoder()
            for _ in range(reps):
                enc.copy_buffer_to_buffer(a, 0, b, 0, n)
            ctx.queue.submit([enc.finish()])
            read_words(sync_buf, 0, 4)
            best = min(best, time.perf_counter() - t0)
        rows.append({"MiB": mib, "copies": reps, "GBps_read_plus_write": 2 * n * reps / best / 1e9, "s": best})
        print(rows[-1], flush=True)
if len(sys.argv) > 1:
    json.dump({"adapter": ctx.adapter_name, "rows": rows}, open(sys.argv[1], "w"), indent=1)
