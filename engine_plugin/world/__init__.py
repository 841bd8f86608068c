"""The chunked world: authoritative CPU data, content versions, dirty tracking (numpy only).

``World(chunk_shape, fields, max_chunks=1024)`` holds chunks of a fixed tile shape with
declared typed fields; see :mod:`engine_plugin.world.world` for the storage layout and the
versioning rules the GPU layer relies on.
"""

from .edit import ChunkEdit
from .errors import ChunkBusyError, UnknownChunkError, UnknownFieldError, WorldError, WorldFullError
from .fields import FieldSpec
from .world import World

__all__ = [
    "ChunkBusyError",
    "ChunkEdit",
    "FieldSpec",
    "UnknownChunkError",
    "UnknownFieldError",
    "World",
    "WorldError",
    "WorldFullError",
]
