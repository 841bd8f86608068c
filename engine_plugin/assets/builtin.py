"""Kernels shipped inside the package, found through :mod:`importlib.resources`.

The engine's own product kernels are package data under ``engine_plugin/kernels/engine/``, so
they travel with the wheel. An :class:`~engine_plugin.assets.AssetLibrary` answers
``lib.load("engine/summary.computeShader")`` from there whatever its root, unless the root
holds a folder of that name itself (a game's own copy wins).
"""

from __future__ import annotations

import atexit
import contextlib
import os
from importlib import resources

__all__ = ["builtin_folder", "builtin_root", "resource_folder"]

_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)
_folders: dict[tuple[str, str], str] = {}


def resource_folder(package: str, name: str) -> str:
    """A file-system path for the package-data folder ``name`` of ``package``.

    An installed wheel or a checkout is already on disk; only a package imported from an
    archive is extracted (once, for the life of the process), because the compiler, the cache
    and the watcher all want real paths.
    """
    key = (package, name)
    found = _folders.get(key)
    if found is None:
        data = resources.files(package).joinpath(name)
        if isinstance(data, os.PathLike):
            found = os.fspath(data)
        else:
            found = os.fspath(_extracted.enter_context(resources.as_file(data)))
        _folders[key] = found
    return found


def builtin_root() -> str:
    """The packaged asset root: it holds ``engine/`` (summary, count_above, combine)."""
    return resource_folder("engine_plugin", "kernels")


def builtin_folder(rel: str) -> str | None:
    """The packaged folder of asset ``rel`` (``engine/summary.computeShader``), or None."""
    folder = os.path.join(builtin_root(), *rel.split("/"))
    return folder if os.path.isdir(folder) else None
