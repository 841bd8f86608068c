"""Textures on the GPU for texture, storage-texture and sampler bindings.

Host arrays go up as textures of the format their dtype and channel count name ((h, w),
(h, w, c) for 2-D; (layers | depth, h, w[, c]) for 2d_array and 3d; c of 1, 2 or 4, and 3
padded with an opaque alpha). Output textures are created per run (WebGPU zero-fills a new
texture, so outputs start as zeros) with TEXTURE_BINDING as well as STORAGE_BINDING, so a
run's output texture can be sampled by the next run. Reading back goes through a buffer with
rows padded to WebGPU's 256-byte copy pitch, stripped on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import wgpu

from ..arrays import object_refusal
from ..device.context import DeviceContext
from ..device.destroyed import is_destroyed
from ..errors import DispatchError
from ..formats import masked_refusal
from ..lowering.casts import cast_refusal
from ..lowering.textures import format_channels, format_numpy, upload_format
from .submission import flush_pending

__all__ = ["TextureOutput", "upload_texture", "output_texture", "sampler_for", "read_texture", "view_of", "VIEW_DIMENSION"]

VIEW_DIMENSION = {"2d": "2d", "2d_array": "2d-array", "3d": "3d"}
_ADDRESS = {"clamp": "clamp-to-edge", "repeat": "repeat", "mirror": "mirror-repeat"}
_USAGE_IN = wgpu.TextureUsage.TEXTURE_BINDING | wgpu.TextureUsage.COPY_DST | wgpu.TextureUsage.COPY_SRC
_USAGE_OUT = _USAGE_IN | wgpu.TextureUsage.STORAGE_BINDING


@dataclass
class TextureOutput:
    """A texture a run wrote: ``texture``, its ``format``, ``size`` (w, h, depth or layers), ``dim``."""

    texture: Any
    format: str
    size: tuple[int, int, int]
    dim: str
    name: str = ""

    def __repr__(self) -> str:
        return f"TextureOutput({self.name!r}, {self.format}, {self.size}, {self.dim})"


def view_of(texture: Any, dim: str) -> Any:
    return texture.create_view(dimension=VIEW_DIMENSION[dim])


def _texel_bytes(fmt: str) -> int:
    return format_channels(fmt) * np.dtype(format_numpy(fmt)).itemsize


def upload_texture(ctx: DeviceContext, values: Any, dim: str, name: str, storage_format: str | None = None) -> tuple[Any, str, tuple[int, int, int]]:
    """A texture holding ``values``; answers (texture, format, size). ``storage_format``: the
    format of the storage binding it is for (the texels cast to it, storage usage added).

    Raises:
        DispatchError: a shape or dtype no texture format holds.
    """
    masked = masked_refusal(values)
    if masked is not None:
        raise DispatchError(f"texture {name!r}: {masked}")
    arr = np.asarray(values)
    unreadable = object_refusal(values, arr)
    if unreadable is not None:
        raise DispatchError(f"texture {name!r} ({dim}) {unreadable}")
    spatial = 2 if dim == "2d" else 3
    if arr.ndim == spatial:
        arr = arr[..., None]
    if arr.ndim != spatial + 1 or arr.shape[-1] not in (1, 2, 3, 4):
        want = "(h, w) or (h, w, channels)" if dim == "2d" else f"({'layers' if dim == '2d_array' else 'depth'}, h, w[, channels])"
        raise DispatchError(f"texture {name!r} ({dim}) takes an array of shape {want} with 1, 2, 3 or 4 channels, not {arr.shape}")
    if storage_format is not None:
        # The binding's format decides: the texels go up as the values the kernel reads.
        arr = _storage_texels(arr, storage_format, name)
        fmt: str | None = storage_format
        if arr.shape[-1] != format_channels(storage_format):
            raise DispatchError(f"storage texture {name!r} is {storage_format} ({format_channels(storage_format)} channels); got {arr.shape[-1]}")
    else:
        if arr.dtype.kind == "f" and arr.dtype.itemsize == 8:  # either byte order (">f8" was refused)
            reason = cast_refusal(arr, np.dtype(np.float32))
            if reason:
                raise DispatchError(f"texture {name!r}: {reason}")
            arr = arr.astype(np.float32)
        elif arr.dtype == np.bool_:
            arr = arr.astype(np.uint8) * 255
        if arr.shape[-1] == 3:  # no 3-channel formats: pad with an opaque alpha
            alpha = np.full(arr.shape[:-1] + (1,), 255 if arr.dtype == np.uint8 else 1, arr.dtype)
            arr = np.concatenate([arr, alpha], axis=-1)
        fmt = upload_format(arr.dtype.newbyteorder("<").str.lstrip("|") if arr.dtype.itemsize > 1 else arr.dtype.str.lstrip("|"), arr.shape[-1])
    if fmt is None:
        raise DispatchError(f"texture {name!r}: no texture format holds {arr.dtype} texels (use uint8, float16, float32, uint32 or int32)")
    arr = np.ascontiguousarray(arr, dtype=np.dtype(format_numpy(fmt)))
    if dim == "2d":
        h, w = arr.shape[:2]
        size = (w, h, 1)
    else:
        d, h, w = arr.shape[:3]
        size = (w, h, d)
    _check_size(ctx, name, size, dim)
    if fmt.startswith("bgra8"):  # held in memory as B, G, R, A; numpy's texels are R, G, B, A
        arr = np.ascontiguousarray(arr[..., [2, 1, 0, 3]])
    usage = _USAGE_IN if storage_format is None else _USAGE_OUT
    texture = _new_texture(ctx, size, fmt, usage, dim, name)
    ctx.queue.write_texture({"texture": texture}, arr, {"bytes_per_row": w * _texel_bytes(fmt), "rows_per_image": h}, size)
    return texture, fmt, size


_NORM_SCALE = {"unorm": 255.0, "snorm": 127.0}  # the 8-bit normalised storage formats


def _storage_texels(arr: np.ndarray, fmt: str, name: str) -> np.ndarray:
    """``arr``'s texels in storage format ``fmt``'s host representation, by value: a unorm or
    snorm texel takes its own integer dtype as it is or floats in [0, 1] / [-1, 1] (scaled and
    rounded, as WebGPU stores them); any other format takes values its channel type holds
    (cast_refusal), but a float format refuses uint8 texels (an image's bytes: 0-1 or 0-255 is
    the caller's to say). A 3-channel array gains an opaque alpha (1, as the kernel reads it).

    Raises:
        DispatchError: a value the format cannot hold, or a dtype it cannot take.
    """
    target = np.dtype(format_numpy(fmt))
    norm = next((kind for kind in _NORM_SCALE if kind in fmt), None)
    if arr.dtype == np.bool_:  # a mask: 1 as the kernel reads it (1.0 in a normalised format)
        arr = arr.astype(np.float32 if norm is not None or target.kind == "f" else np.uint8)
    elif norm is None and target.kind == "f" and arr.dtype == np.uint8:
        # An image's bytes: a texture binding reads them as 0-1 (rgba8unorm), a float storage
        # format would hold 0-255: the same array read 255 times larger through one binding
        # kind than the other (review helper 205). Which one is meant is said by the caller.
        raise DispatchError(
            f"storage texture {name!r} is {fmt}: uint8 texels are ambiguous there (a texture binding reads a uint8 image as 0-1, "
            f"{fmt} would hold 0-255): pass image / 255 for 0-1, or image.astype(np.float32) for 0-255"
        )
    if norm is not None:
        lo = -1.0 if norm == "snorm" else 0.0
        if arr.dtype.kind == "f":
            if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < lo or arr.max() > 1.0):
                raise DispatchError(f"storage texture {name!r} is {fmt}: a float texel must be in [{lo:g}, 1] (or pass {target.name} texels)")
            out = np.rint(arr.astype(np.float64) * _NORM_SCALE[norm]).astype(target)
        elif arr.dtype.kind in "iu":  # integer texels as stored ({target.name} values: 0-255 for unorm8)
            reason = cast_refusal(arr, target) if arr.dtype != target else None
            if reason:
                raise DispatchError(f"storage texture {name!r} is {fmt}: integer texels are its stored {target.name} values; {reason}")
            out = arr.astype(target)
        else:
            raise DispatchError(f"storage texture {name!r} is {fmt}: it takes {target.name} texels or floats in [{lo:g}, 1], not {arr.dtype}")
        one = target.type(_NORM_SCALE[norm])
    else:
        if arr.dtype.kind not in "fiu":
            raise DispatchError(f"storage texture {name!r} is {fmt}: {arr.dtype} texels are not numbers")
        # (f16 formats too: what would become infinity or 0 there, an integer f16 would round)
        reason = cast_refusal(arr, target) if arr.dtype != target else None
        if reason:
            raise DispatchError(f"storage texture {name!r} ({fmt}): {reason}")
        out = arr.astype(target)
        one = target.type(1)
    if out.shape[-1] == 3:  # no 3-channel formats: an opaque alpha, as the kernel reads it
        out = np.concatenate([out, np.full(out.shape[:-1] + (1,), one, target)], axis=-1)
    return out


def _check_size(ctx: DeviceContext, name: str, size: tuple[int, int, int], dim: str) -> None:
    w, h, d = size
    limit = ctx.limit("max-texture-dimension-3d" if dim == "3d" else "max-texture-dimension-2d")
    if min(w, h, d) < 1 or max(w, h) > limit or (dim == "3d" and d > limit) or (dim == "2d_array" and d > ctx.limit("max-texture-array-layers")):
        raise DispatchError(f"texture {name!r} of size {size} is empty or past this device's limits ({limit} a side)")


def output_texture(ctx: DeviceContext, fmt: str, size: tuple[int, int, int], dim: str, name: str) -> Any:
    """A new (zero-filled) texture a run writes through a storage binding."""
    _check_size(ctx, name, size, dim)
    return _new_texture(ctx, size, fmt, _USAGE_OUT, dim, name)


def _new_texture(ctx: DeviceContext, size: tuple[int, int, int], fmt: str, usage: int, dim: str, name: str) -> Any:
    """A texture, or a DispatchError saying why the device would not make one (out of memory:
    wgpu's raw validation error, naming nothing of the user's, before: review helper 181)."""
    try:
        return ctx.device.create_texture(size=size, format=fmt, usage=usage, dimension="3d" if dim == "3d" else "2d", label=name)
    except (wgpu.GPUValidationError, wgpu.GPUOutOfMemoryError) as exc:
        if ctx.guard.lost:
            raise  # the device went away: the run's loss handling says so
        nbytes = size[0] * size[1] * size[2] * _texel_bytes(fmt)
        lines = str(exc).strip().splitlines()
        raise DispatchError(
            f"texture {name!r} of size {size} ({fmt}, {nbytes:,} bytes) cannot be made on this device: {lines[-1].strip() if lines else exc}"
        ) from None


def sampler_for(ctx: DeviceContext, filter_: str, address: str) -> Any:
    cache = ctx.cache("runtime")
    key = ("sampler", filter_, address)
    found = cache.get(key)
    if found is None:
        mode = _ADDRESS[address]
        found = cache[key] = ctx.device.create_sampler(
            address_mode_u=mode, address_mode_v=mode, address_mode_w=mode, mag_filter=filter_, min_filter=filter_, mipmap_filter="nearest"
        )
    return found


def read_texture(ctx: DeviceContext, out: TextureOutput, read_words: Any) -> np.ndarray:
    """The texels of ``out``: (h, w, channels) for 2-D, (depth | layers, h, w, channels) else."""
    if is_destroyed(out.texture):  # copying from it would abort the process (device/destroyed.py)
        raise DispatchError(f"cannot read texture {out.texture.label!r}: it was destroyed (destroy() was called on it)")
    if not int(out.texture.usage) & wgpu.TextureUsage.COPY_SRC:  # wgpu's raw validation error at finish() before (helper 157)
        raise DispatchError(f"cannot read texture {out.texture.label!r}: it lacks COPY_SRC usage (create it with usage including wgpu.TextureUsage.COPY_SRC)")
    try:
        texel, channel, channels = _texel_bytes(out.format), np.dtype(format_numpy(out.format)), format_channels(out.format)
    except KeyError:  # a caller's texture of a format no binding here makes (a raw KeyError before: helper 181)
        raise DispatchError(f"cannot read texture {out.texture.label!r}: abi.read does not read its format {out.format}") from None
    w, h, d = out.size
    pitch = -(-(w * texel) // 256) * 256  # a copy's rows are 256-byte aligned
    # Rows a staging buffer takes at once: a texture under the buffer limit whose padded rows
    # were over it failed with wgpu's raw error (review helper 181); it is read in parts.
    most = max(1, int(ctx.limit("max-buffer-size")) // pitch)
    raw = np.empty((d, h, w * texel), dtype=np.uint8)
    flush_pending()  # a deferred run first, in queue order
    if h * d <= most:
        parts = [(0, 0, h, d)]  # (layer, row, rows, layers): all at once
    else:
        rows = min(h, most)
        parts = [(z, y, min(rows, h - y), 1) for z in range(d) for y in range(0, h, rows)]
    for z, y, rows, layers in parts:
        staging = ctx.device.create_buffer(size=pitch * rows * layers, usage=wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC, label="texture read")
        encoder = ctx.device.create_command_encoder()
        encoder.copy_texture_to_buffer(
            {"texture": out.texture, "origin": (0, y, z)}, {"buffer": staging, "bytes_per_row": pitch, "rows_per_image": rows}, (w, rows, layers)
        )
        with ctx.guard.submitting("abi.read of a texture"):
            ctx.queue.submit([encoder.finish()])
        got = np.frombuffer(read_words(staging), dtype=np.uint8).reshape(layers, rows, pitch)[:, :, : w * texel]
        raw[z : z + layers, y : y + rows] = got
    texels = raw.view(channel).reshape(d, h, w, channels)
    if out.format.startswith("bgra8"):  # memory order B, G, R, A: the texel's channels are R, G, B, A
        texels = texels[..., [2, 1, 0, 3]]
    return texels[0] if out.dim == "2d" else texels
