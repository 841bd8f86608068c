"""Compute shader assets: ``NAME.computeShader/`` folders, references, and hot reload.

    lib = AssetLibrary(root="assets", cache="cache")
    ref = lib.load("kernels/blur.computeShader")
    ref.program().variant(specialize={"T": "f32"}).run(n, inputs={...})
    lib.watch()          # then lib.poll() once a frame applies reloads between frames

Modules: ``folder`` (read one asset), ``reload`` (events, preparation, body/layout
classification: pure Python), ``watcher`` (watchdog observer, debounce, reload worker),
``library`` (references, the engine-thread half of a reload), ``prefetch`` (start-up
warm-up from the local cache and the remote tier).
"""

from typing import Any

from .folder import ASSET_SUFFIX, AssetSource, find_assets, is_editor_noise, read_asset_folder

# The library pulls in the runtime (and so wgpu); ``engine_plugin.assets.folder`` stays light
# for tools that only read assets (lower, info, bake workers), so these load on first use.
_LAZY = {
    "AssetLibrary": "library",
    "ComputeShaderRef": "library",
    "PrefetchReport": "prefetch",
    "allow_network": "library",
    "ReloadEvent": "reload",
    "ReloadFailure": "reload",
    "carry_spec": "reload",
    "plan_signature": "reload",
    "ReloadService": "watcher",
    "is_ignored_name": "watcher",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine_plugin.assets' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ASSET_SUFFIX",
    "AssetLibrary",
    "AssetSource",
    "ComputeShaderRef",
    "PrefetchReport",
    "ReloadEvent",
    "ReloadFailure",
    "ReloadService",
    "allow_network",
    "carry_spec",
    "find_assets",
    "is_editor_noise",
    "is_ignored_name",
    "plan_signature",
    "read_asset_folder",
]
