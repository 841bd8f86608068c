"""WebGPU flag values (the spec's numbers, which wgpu-py uses), for modules that must not import wgpu."""

from __future__ import annotations

__all__ = ["MAP_READ", "COPY_SRC", "COPY_DST", "UNIFORM", "STORAGE", "MAP_MODE_READ", "QUERY_RESOLVE"]

# BufferUsage
MAP_READ = 0x0001
COPY_SRC = 0x0004
COPY_DST = 0x0008
UNIFORM = 0x0040
STORAGE = 0x0080
QUERY_RESOLVE = 0x0200
# MapMode
MAP_MODE_READ = 0x0001
