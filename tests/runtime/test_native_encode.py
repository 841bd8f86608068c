"""The runtime encodes its commands through wgpu-native's C functions (runtime/native.py):
an invalid command still raises wgpu-py's GPUValidationError, with its message, at the
encoder's finish(), and nothing of that submission runs."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from engine_plugin.bench.host_cases import RawAxpy
from engine_plugin.device.context import get_context
from engine_plugin.runtime.output import read_words
from engine_plugin.runtime.submission import submit_records

pytestmark = pytest.mark.gpu


def test_an_invalid_command_encoded_natively_raises_at_finish_with_wgpus_message():
    ctx = get_context()
    raw = RawAxpy(ctx, 64, outputs=2, slots=2)
    y = raw.ys[0]
    good = (raw.pipeline, raw.bind_groups[0], 0, raw.groups, [("clear", y, 0, raw.nbytes)])
    with pytest.raises(wgpu.GPUValidationError, match="min_uniform_buffer_offset_alignment"):
        submit_records(ctx.device, ctx.queue, ctx.guard, [good, (raw.pipeline, raw.bind_groups[1], 3, raw.groups, [])])
    with pytest.raises(wgpu.GPUValidationError, match="(?i)clear|range|size|overrun"):
        submit_records(ctx.device, ctx.queue, ctx.guard, [(None, None, None, (0, 0, 0), [("zero", y, 0, raw.nbytes + 256)])])
    # Nothing of the refused submissions ran; the same records, valid, run and compute.
    ctx.queue.write_buffer(raw.params, 0, raw.p)
    ctx.queue.write_buffer(y, 0, np.full(64, 7.0, np.float32))
    assert np.frombuffer(read_words(y, 0, 256), np.float32).tolist() == [7.0] * 64
    submit_records(ctx.device, ctx.queue, ctx.guard, [good])
    np.testing.assert_array_equal(np.frombuffer(read_words(y, 0, 256), np.float32), 2.0 * np.arange(64, dtype=np.float32) + 1.0)  # y = a x + 1
