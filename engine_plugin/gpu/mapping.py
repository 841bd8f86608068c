"""Mapping staging buffers for reading: one entry point for the backend ring and ``abi.read``."""

from __future__ import annotations

from typing import Any

__all__ = ["map_submitted"]

from .flags import MAP_MODE_READ as _MAP_MODE_READ

# wgpu-py's map_async(READ) first submits an empty command buffer (a workaround for mapping a
# buffer no submission touched yet); on lavapipe every submit waits for the previous one, so
# that would bill the GPU work to the frame. Staging copies are always submitted before their
# map: the case wgpu-py's own queue.read_buffer maps with this internal mode.
_MAP_MODE_READ_SUBMITTED = "READ_NOSYNC"


def map_submitted(staging: Any, size: int) -> Any:
    """Start mapping a staging buffer whose copy is already submitted (see above)."""
    try:
        return staging.map_async(_MAP_MODE_READ_SUBMITTED, 0, size)
    except (KeyError, ValueError, TypeError):  # a wgpu-py without the internal mode
        return staging.map_async(_MAP_MODE_READ, 0, size)
