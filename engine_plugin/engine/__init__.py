"""The per-frame engine loop: products over a chunked world (SPEC section 4).

    from engine_plugin.engine import Engine, fallbacks
    from engine_plugin.gpu import ReadbackPolicy

    engine = Engine(world, library)
    engine.register_product("engine/summary.computeShader", fields={"src": "height"},
                            policy=ReadbackPolicy.SUMMARY, apply=on_summary,
                            cpu_fallback=fallbacks.summary)
    stats = engine.frame()            # FrameStats; never waits for the GPU

Modules: ``engine`` (Engine, EngineConfig: the frame loop), ``contract`` (what a product
kernel declares; ProductWork, ProductResult, ProductError), ``products`` (per-product state,
work lists, revalidation), ``gpu_product`` (a product's wgpu resources on a WgpuBackend),
``selection`` (tile selections and paths), ``stats`` (FrameStats), ``fallbacks`` (CPU
fallbacks of the engine's kernels), ``kernels`` (those kernels, package data under ``engine_plugin/kernels/engine``).
"""

from . import fallbacks
from .contract import ENGINE_PARAMS, ProductError, ProductResult, ProductWork
from .engine import Engine, EngineConfig
from .kernels import kernel_folder, kernel_program
from .selection import path_tiles
from .stats import FrameStats

__all__ = [
    "ENGINE_PARAMS",
    "Engine",
    "EngineConfig",
    "FrameStats",
    "ProductError",
    "ProductResult",
    "ProductWork",
    "fallbacks",
    "kernel_folder",
    "kernel_program",
    "path_tiles",
]
