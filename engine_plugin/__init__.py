"""engine_plugin: compute shader assets for game engines, on wgpu-py.

Layers, lowest first (a lower layer never imports a higher one):
errors -> lowering -> gpu.device -> runtime -> substrate -> cache -> assets -> world -> gpu backends -> engine -> demo/cli.

``__version__`` is the one source of the version: ``pyproject.toml`` reads it (a dynamic
version), and ``engine-plugin --version`` and the bake report print it.
"""

__version__ = "0.1.0"
