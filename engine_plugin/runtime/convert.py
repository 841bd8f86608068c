"""Cast by value on the GPU: an earlier run's output of another scalar type as an input.

The seed: an ``i32``, ``u32`` or ``f32`` read binding without ``bits`` takes data of another
element type cast by value. Host arrays are cast by numpy before upload; GPU-resident data
(a chained :class:`Output`) goes through one small conversion dispatch, recorded in the same
submission right before the run that reads it.
"""

from __future__ import annotations

from typing import Any

from ..device.context import DeviceContext
from ..lowering.emit import by_value, from_word, to_word

__all__ = ["conversion_record", "clamp_record", "CONVERT_WORKGROUP"]

CONVERT_WORKGROUP = 64
_MAX_GROUPS_X = 65535

_SOURCE = """
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size({wg})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {{
    let i = gid.x + gid.y * groups.x * {wg}u;
    if (i >= arrayLength(&dst)) {{ return; }}
    let w = src[i];
    dst[i] = {expr};
}}
"""


def _pipeline(ctx: DeviceContext, src: str, dst: str) -> Any:
    cache = ctx.cache("runtime")
    key = ("convert", src, dst)
    found = cache.get(key)
    if found is None:
        module = ctx.device.create_shader_module(
            code=_SOURCE.format(wg=CONVERT_WORKGROUP, expr=to_word(by_value(from_word("w", src), src, dst), dst)), label=f"cast {src}->{dst}"
        )
        found = cache[key] = ctx.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"}, label=f"cast {src}->{dst}")
    return found


# A count word clamped on the GPU: target[0] = min(source[0], target[1]) (the limit written into
# target[1] by the host). An Output's counter may hold more than its count (an append past its
# capacity, a live count before the clamp to its run's n).
_CLAMP_SOURCE = """
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(1)
fn main() {
    dst[0] = min(src[0], dst[1]);
}
"""


def clamp_record(ctx: DeviceContext, source: Any, target: Any) -> tuple:
    """A submission record setting word 0 of ``target`` (16 bytes, its word 1 holding the
    limit) to min(word 0 of ``source``, the limit)."""
    cache = ctx.cache("runtime")
    pipeline = cache.get(("clamp count",))
    if pipeline is None:
        module = ctx.device.create_shader_module(code=_CLAMP_SOURCE, label="clamp a count")
        pipeline = cache[("clamp count",)] = ctx.device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "main"}, label="clamp a count"
        )
    group = ctx.device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[
            {"binding": 0, "resource": {"buffer": source, "offset": 0, "size": 4}},
            {"binding": 1, "resource": {"buffer": target, "offset": 0, "size": 16}},
        ],
    )
    return (pipeline, group, None, (1, 1, 1), [])


def conversion_record(ctx: DeviceContext, source: Any, target: Any, words: int, src: str, dst: str) -> tuple:
    """A submission record converting ``words`` words of ``source`` (scalar ``src``) into
    ``target`` (scalar ``dst``), by value."""
    pipeline = _pipeline(ctx, src, dst)
    group = ctx.device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[
            {"binding": 0, "resource": {"buffer": source, "offset": 0, "size": words * 4}},
            {"binding": 1, "resource": {"buffer": target, "offset": 0, "size": words * 4}},
        ],
    )
    total = -(-words // CONVERT_WORKGROUP)
    gy = -(-total // _MAX_GROUPS_X)
    gx = -(-total // gy)
    return (pipeline, group, None, (gx, gy, 1), [])
