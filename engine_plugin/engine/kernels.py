"""The engine's own product kernels, shipped as package data under ``engine_plugin/kernels/engine/``.

``summary`` (per-chunk min/max/mean/sum, ``SUMMARY``), ``count_above`` (per-chunk count over a
threshold, ``SUMMARY``) and ``combine`` (per-tile ``a OP b``, the selection and ``FULL_FIELD``
policies). Load them through any :class:`~engine_plugin.assets.AssetLibrary` (it finds them whatever its
root: ``lib.load("engine/summary.computeShader")``), or as plain programs here.
"""

from __future__ import annotations

import os
from typing import Any

from ..assets.builtin import builtin_root
from ..errors import AssetError, Span

__all__ = ["ENGINE_KERNELS", "kernel_folder", "kernel_program"]

ENGINE_KERNELS = ("summary", "count_above", "combine")


def kernel_folder(name: str) -> str:
    """The folder of engine kernel ``name`` (``engine_plugin/kernels/engine/NAME.computeShader``)."""
    folder = os.path.join(builtin_root(), "engine", f"{name}.computeShader")
    if not os.path.isdir(folder):
        raise AssetError(
            f"engine kernel {name!r} not found; the engine kernels are {', '.join(ENGINE_KERNELS)} (package data under engine_plugin/kernels/engine/)",
            Span(folder),
        )
    return folder


def kernel_program(name: str, device: Any = None) -> Any:
    """Engine kernel ``name`` as a :class:`~engine_plugin.runtime.Program` (no hot reload)."""
    from .. import abi
    from ..assets.folder import read_asset_folder

    src = read_asset_folder(kernel_folder(name))
    schema = abi.parse(src.yaml_text, src.yaml_path)
    return abi.program(key=f"engine/{name}.computeShader", schema=schema, wgsl=src.wgsl_text, wgsl_path=src.wgsl_path, device=device, modules=src.module_texts)
