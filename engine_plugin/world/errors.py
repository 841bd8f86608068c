"""Errors of the chunked world (local to ``world`` until they earn a place in ``errors.py``)."""

from __future__ import annotations

from ..errors import PluginError

__all__ = ["ChunkBusyError", "UnknownChunkError", "UnknownFieldError", "WorldError", "WorldFullError"]


class WorldError(PluginError, ValueError):
    """A world call with a bad argument: an unknown field, a wrong shape, a bad tile."""


class UnknownChunkError(WorldError, KeyError):
    """No live chunk has this key (never added, or evicted)."""


class UnknownFieldError(WorldError, KeyError):
    """A field name the world does not declare, asked of a chunk's edit (a mapping: a KeyError too)."""


class WorldFullError(WorldError):
    """Every mirror slot is taken; evict a chunk or build the world with a larger ``max_chunks``."""


class ChunkBusyError(WorldError):
    """The chunk has an open ``world.edit(key)``; other mutations of it wait for the edit to end."""
