"""Kernels shipped inside the package, found through :mod:`importlib.resources`.

The engine's own product kernels are package data under ``engine_plugin/kernels/engine/``, so
they travel with the wheel. An :class:`~engine_plugin.assets.AssetLibrary` answers
``lib.load("engine/summary.computeShader")`` from there whatever its root, unless the root
holds a folder of that name itself (a game's own copy wins).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from importlib import resources
from typing import Any

__all__ = ["builtin_folder", "builtin_root", "resource_folder"]

_folders: dict[tuple[str, str], str] = {}
_lock = threading.Lock()


def resource_folder(package: str, name: str) -> str:
    """A file-system path for the package-data folder ``name`` of ``package``.

    An installed wheel or a checkout is already on disk; only a package imported from an
    archive is extracted (once, for the life of the process), because the compiler, the cache
    and the watcher all want real paths.
    """
    key = (package, name)
    found = _folders.get(key)
    if found is None:
        with _lock:  # one extraction: threads loading at once must agree on the folder
            found = _folders.get(key)
            if found is None:
                data = resources.files(package).joinpath(name)
                found = os.fspath(data) if isinstance(data, os.PathLike) else _extract(data)
                _folders[key] = found
    return found


def _extract(data: Any) -> str:
    """A package-data folder inside an archive, copied to a temporary folder removed at exit
    (``resources.as_file`` extracts folders only from Python 3.12)."""
    root = tempfile.mkdtemp(prefix="engine_plugin-data-")
    atexit.register(shutil.rmtree, root, True)

    def copy(node: Any, into: str) -> None:
        for child in node.iterdir():
            target = os.path.join(into, child.name)
            if child.is_dir():
                os.makedirs(target, exist_ok=True)
                copy(child, target)
            else:
                with open(target, "wb") as f:
                    f.write(child.read_bytes())

    folder = os.path.join(root, data.name)
    os.makedirs(folder)
    copy(data, folder)
    return folder


def builtin_root() -> str:
    """The packaged asset root: it holds ``engine/`` (summary, count_above, combine)."""
    return resource_folder("engine_plugin", "kernels")


def builtin_folder(rel: str) -> str | None:
    """The packaged folder of asset ``rel`` (``engine/summary.computeShader``), or None: only
    a ``.computeShader`` folder inside the packaged root (no ``..``, no other package data)."""
    parts = rel.split("/")
    if not rel.endswith(".computeShader") or any(p in ("", ".", "..") for p in parts):
        return None
    folder = os.path.join(builtin_root(), *parts)
    return folder if os.path.isdir(folder) else None
