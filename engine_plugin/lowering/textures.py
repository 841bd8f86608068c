"""Texture, storage-texture and sampler bindings: their WGSL types and host formats.

    bindings:
      - { name: img,  kind: texture }                               # texture_2d<f32>
      - { name: smp,  kind: sampler, filter: linear, address: clamp }
      - { name: out,  kind: storage_texture, format: rgba8unorm, size: [nx, ny] }

A ``texture`` is sampled (``dim``: 2d, 2d_array or 3d; ``sample``: float, uint or sint); a
``storage_texture`` has a ``format`` (one WebGPU allows for storage) and an ``access``
(``write`` by default); with ``size`` (1 to 3 count expressions) the host allocates it, a
new texture each run, which WebGPU zero-fills, so an output texture starts as zeros too.
Pure Python: the runtime maps these names to wgpu's enums.
"""

from __future__ import annotations

__all__ = [
    "TEXTURE_DIMS",
    "SAMPLE_TYPES",
    "READ_WRITE_STORAGE_FORMATS",
    "STORAGE_FORMATS",
    "FILTERS",
    "ADDRESS_MODES",
    "texture_wgsl",
    "storage_texture_wgsl",
    "format_channels",
    "format_numpy",
]

TEXTURE_DIMS = ("2d", "2d_array", "3d")
SAMPLE_TYPES = {"float": "f32", "uint": "u32", "sint": "i32"}
FILTERS = ("linear", "nearest")
ADDRESS_MODES = ("clamp", "repeat", "mirror")

# Storage formats WebGPU supports everywhere (no optional feature): texel type and channels.
STORAGE_FORMATS: dict[str, tuple[str, int, str]] = {
    # format: (sample type, channels, numpy dtype of one channel)
    "rgba8unorm": ("float", 4, "u1"),
    "rgba8snorm": ("float", 4, "i1"),
    "rgba8uint": ("uint", 4, "u1"),
    "rgba8sint": ("sint", 4, "i1"),
    "rgba16uint": ("uint", 4, "<u2"),
    "rgba16sint": ("sint", 4, "<i2"),
    "rgba16float": ("float", 4, "<f2"),
    "r32uint": ("uint", 1, "<u4"),
    "r32sint": ("sint", 1, "<i4"),
    "r32float": ("float", 1, "<f4"),
    "rg32uint": ("uint", 2, "<u4"),
    "rg32sint": ("sint", 2, "<i4"),
    "rg32float": ("float", 2, "<f4"),
    "rgba32uint": ("uint", 4, "<u4"),
    "rgba32sint": ("sint", 4, "<i4"),
    "rgba32float": ("float", 4, "<f4"),
    "bgra8unorm": ("float", 4, "u1"),  # needs the bgra8unorm-storage feature (requested where the adapter has it)
}

# What WebGPU lets a kernel both read and write as a storage texture, on every adapter.
READ_WRITE_STORAGE_FORMATS = ("r32float", "r32uint", "r32sint")

# Formats a numpy array uploads to, by (channel dtype, channels).
_UPLOAD = {
    ("u1", 1): "r8unorm",
    ("u1", 2): "rg8unorm",
    ("u1", 4): "rgba8unorm",
    ("<f2", 1): "r16float",
    ("<f2", 2): "rg16float",
    ("<f2", 4): "rgba16float",
    ("<f4", 1): "r32float",
    ("<f4", 2): "rg32float",
    ("<f4", 4): "rgba32float",
    ("<u4", 1): "r32uint",
    ("<u4", 2): "rg32uint",
    ("<u4", 4): "rgba32uint",
    ("<i4", 1): "r32sint",
    ("<i4", 2): "rg32sint",
    ("<i4", 4): "rgba32sint",
}
_FORMAT_SAMPLE = {fmt: ("float" if dt in ("u1", "<f2", "<f4") else "uint" if dt == "<u4" else "sint") for (dt, _), fmt in _UPLOAD.items()}


def texture_wgsl(dim: str, sample: str) -> str:
    return f"texture_{dim}<{SAMPLE_TYPES[sample]}>"


def storage_texture_wgsl(dim: str, fmt: str, access: str) -> str:
    return f"texture_storage_{dim}<{fmt}, {access}>"


def format_channels(fmt: str) -> int:
    if fmt in STORAGE_FORMATS:
        return STORAGE_FORMATS[fmt][1]
    for (_, channels), f in _UPLOAD.items():
        if f == fmt:
            return channels
    raise KeyError(fmt)


def format_numpy(fmt: str) -> str:
    """The numpy dtype of one channel of ``fmt`` (how texels read back)."""
    if fmt in STORAGE_FORMATS:
        return STORAGE_FORMATS[fmt][2]
    for (dt, _), f in _UPLOAD.items():
        if f == fmt:
            return dt
    raise KeyError(fmt)


def upload_format(dtype_str: str, channels: int) -> str | None:
    """The texture format a numpy array of this channel dtype and channel count goes up as."""
    return _UPLOAD.get((dtype_str, channels))


def format_sample(fmt: str) -> str:
    """float, uint or sint: what a sampled texture of ``fmt`` answers."""
    if fmt in STORAGE_FORMATS:
        return STORAGE_FORMATS[fmt][0]
    return _FORMAT_SAMPLE[fmt]
