"""engine_plugin: compute shader assets for game engines, on wgpu-py.

Layers, lowest first (a lower layer never imports a higher one; ``tests/test_layers.py`` holds
the table for every package):
errors, formats -> lowering, cache, world (pure) -> device -> substrate -> runtime (the one
execution core) -> assets -> bake -> gpu (the SPEC section 3 backend layer) -> engine ->
demo, bench, commands.

``__version__`` is the one source of the version: ``pyproject.toml`` reads it (a dynamic
version), and ``engine-plugin --version`` and the bake report print it.
"""

__version__ = "0.1.0"
