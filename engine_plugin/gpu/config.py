"""Budgets of a :class:`~engine_plugin.gpu.wgpu_backend.WgpuBackend` and its product descriptions."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from .backend import ReadbackCallback
from .descriptors import GpuDescriptorError, ReadbackDesc, ReadbackPolicy

__all__ = ["WgpuBackendConfig", "WgpuProductDesc", "product_refusal", "readback_range", "source_size"]


@dataclass(frozen=True)
class WgpuBackendConfig:
    """Every bound a :class:`WgpuBackend` enforces. Requests past a bound are refused, not queued.

    Attributes:
        enabled: False makes a backend that creates nothing and refuses everything.
        max_fields: registered field mirrors.
        max_products: registered products (slots of the generation table).
        max_chunks_per_dispatch: the chunk budget of one dispatch.
        max_workgroups_x: the total workgroup-X count of one dispatch (WebGPU guarantees 65,535).
        max_inflight_readbacks: accepted readbacks not yet delivered by ``poll``.
        max_inflight_readback_bytes: the bytes they read back, together. (Staging buffers are
            pooled by power-of-two size class, at least 256 B: the staging memory in flight is
            under twice this, and the idle pool keeps at most this much besides.)
        allow_full_field: opt in to the debug-only ``ReadbackPolicy.FULL_FIELD``.
        stall_probe_s: when a readback has been pending this long, ``poll`` probes the device
            (one 4-byte write) at most this often: ``device.destroy()`` stops wgpu's poll thread,
            so a lost device's maps would otherwise stay pending for ever.
        waiter_slice_s: how often the readback waiter thread rechecks for cancellation.
        close_wait_s: how long ``close()`` waits, all together, for copies of failed readbacks
            still running on the GPU before releasing their staging without destroying it.
        warm_up: do one tiny readback when the backend is made, so the first frame does not
            pay wgpu-py's one-time setup of the map path (tens of ms).
        gpu_timing: time batched dispatches with timestamp queries where the adapter has
            them (:meth:`WgpuBackend.gpu_times`; the engine's ``FrameStats.product_gpu_ms``).
        gpu_timing_every: time a product's dispatch at most once in this many batches
            (frames): its first dispatch, then one every N frames. A timed dispatch runs in a
            compute pass of its own, between timestamps that wait for the work before them,
            so a timed frame's products do not overlap on the GPU; 1 times every dispatch.
        reuse_staging: keep idle MAP_READ staging buffers (power-of-two sizes, within the
            readback budgets) for later readbacks instead of destroying each after delivery.
    """

    enabled: bool = True
    max_fields: int = 32
    max_products: int = 256
    max_chunks_per_dispatch: int = 65_536
    max_workgroups_x: int = 65_535
    max_inflight_readbacks: int = 16
    max_inflight_readback_bytes: int = 64 * 2**20
    allow_full_field: bool = False
    stall_probe_s: float = 0.5
    waiter_slice_s: float = 0.05
    close_wait_s: float = 0.5
    warm_up: bool = True
    gpu_timing: bool = True
    gpu_timing_every: int = 16
    reuse_staging: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("bool",) and not isinstance(v, bool):
                raise GpuDescriptorError(f"WgpuBackendConfig.{f.name} must be True or False, not {v!r}")
            if f.type == "int" and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise GpuDescriptorError(f"WgpuBackendConfig.{f.name} must be a positive int, not {v!r}")
            if f.type == "float" and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0):
                raise GpuDescriptorError(f"WgpuBackendConfig.{f.name} must be a positive number, not {v!r}")


@dataclass(frozen=True)
class WgpuProductDesc:
    """The caller-made GPU resources of one product.

    Pipelines, shader meaning and bind-group layouts stay the caller's: the backend binds
    ``bind_groups`` at indices 0.. (None skips an index) and dispatches ``pipeline``.

    A readback source is a byte range ``[readback_offset, readback_offset + readback_size)``
    of a buffer with COPY_SRC usage (``readback_size=None``: to the buffer's end), and comes
    with the ``callback`` its readbacks complete through. A source without a callback, or a
    callback (or offset, or size) without a source, is refused: such a callback could never fire.

    ``fields`` (optional) names the input fields this product may be dispatched over.

    ``dynamic_offsets[i]`` are the dynamic offsets bind group ``i`` is set with (a layout
    entry with ``has_dynamic_offset``, e.g. the ABI runtime's params uniform); ``writable``
    lists the product-owned buffers a :class:`DispatchDesc` may write before dispatching
    (COPY_DST usage required).
    """

    pipeline: Any
    bind_groups: Sequence[Any] = ()
    readback_source: Any = None
    readback_offset: int = 0
    readback_size: int | None = None
    callback: ReadbackCallback | None = None
    fields: tuple[str, ...] = ()
    dynamic_offsets: Sequence[Sequence[int]] = ()
    writable: Sequence[Any] = ()


def product_refusal(desc: Any, copy_src_flag: int = 0x0004, align: int = 4) -> str | None:
    """Why ``desc`` cannot be registered, or None when it can (pure validation, no device)."""
    if not isinstance(desc, WgpuProductDesc):
        return f"expected a WgpuProductDesc, not {type(desc).__name__}"
    if desc.pipeline is None:
        return "no pipeline"
    if len(desc.dynamic_offsets) > len(desc.bind_groups):
        return f"{len(desc.dynamic_offsets)} dynamic offset lists for {len(desc.bind_groups)} bind groups"
    for offsets in desc.dynamic_offsets:
        if any(not isinstance(o, int) or isinstance(o, bool) or o < 0 or o % 256 for o in offsets):
            return f"dynamic offsets {list(offsets)} must be non-negative multiples of 256"
    copy_dst = 0x0008
    for buf in desc.writable:
        if not int(getattr(buf, "usage", 0)) & copy_dst:
            return f"writable buffer {getattr(buf, 'label', buf)!r} lacks COPY_DST usage, so it cannot be written"
    src = desc.readback_source
    if src is None:
        if desc.callback is not None:
            return "a readback callback without a readback source could never fire"
        if desc.readback_offset or desc.readback_size is not None:
            return "a readback offset/size without a readback source"
        return None
    if desc.callback is None:
        return "a readback source without a callback: its readbacks could never be delivered"
    if not int(getattr(src, "usage", 0)) & copy_src_flag:
        return "the readback source buffer lacks COPY_SRC usage, so it cannot be copied"
    size = source_size(desc)
    if desc.readback_offset < 0 or size <= 0 or desc.readback_offset + size > int(src.size):
        return f"readback range {desc.readback_offset}+{size} is outside the {src.size} B source"
    if desc.readback_offset % align or size % align:
        return f"readback range {desc.readback_offset}+{size} is not {align}-byte aligned"
    return None


def source_size(desc: WgpuProductDesc) -> int:
    """Bytes of the product's readback source range (0 without a source)."""
    if desc.readback_source is None:
        return 0
    if desc.readback_size is not None:
        return desc.readback_size
    return int(desc.readback_source.size) - desc.readback_offset


def readback_range(
    desc: ReadbackDesc, product: WgpuProductDesc, product_size: int, field: tuple[Any, int] | None, allow_full_field: bool, align: int = 4
) -> tuple[Any, int, int] | str:
    """``(source buffer, byte offset, size)`` a readback request copies, or why it is refused.

    ``field`` is ``(mirror buffer, mirror bytes)`` of ``desc.field`` when that is registered.
    """
    policy = desc.policy
    if not isinstance(policy, ReadbackPolicy):  # a string "none" transferred data (review helper 189)
        return f"policy must be a ReadbackPolicy, not {policy!r}"
    if policy is ReadbackPolicy.NONE:
        return "policy NONE transfers nothing"
    if policy is ReadbackPolicy.FULL_FIELD and not allow_full_field:
        return "FULL_FIELD readback is debug-only; set WgpuBackendConfig(allow_full_field=True)"
    if policy is ReadbackPolicy.SELECTED_TILES and not desc.tiles:
        return "SELECTED_TILES needs the selected tiles"
    if policy is ReadbackPolicy.SELECTED_PATH and not desc.path:
        return "SELECTED_PATH needs the path"
    if product.callback is None:
        return "the product was registered without a readback callback"
    if desc.field is not None:
        if policy is not ReadbackPolicy.FULL_FIELD:
            return "only FULL_FIELD reads a field mirror; other policies read the product's source"
        if field is None:
            return f"field {desc.field!r} is not registered"
        source, base, avail = field[0], 0, field[1]
    else:
        source, base, avail = product.readback_source, product.readback_offset, product_size
    try:  # numpy integers count as ints; a float or a string is refused (a raw AttributeError before: helper 189)
        offset = operator.index(desc.offset)
        size = operator.index(desc.size) if desc.size is not None else avail - offset
    except TypeError:
        return f"offset and size must be whole numbers of bytes, not {desc.offset!r} and {desc.size!r}"
    if offset < 0 or size <= 0 or offset + size > avail:
        return f"range {offset}+{size} is outside the {avail} B source range"
    if offset % align or size % align:
        return f"range {offset}+{size} is not {align}-byte aligned"
    return source, base + offset, size
