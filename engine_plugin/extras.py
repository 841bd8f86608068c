"""Optional dependencies: which extra provides what, and one clear error when one is missing.

``pip install engine_plugin`` is the library (wgpu, numpy, pyyaml, msgpack, watchdog). The rest
is opt-in::

    [cli]   rich                          the engine-plugin command's tables and progress bars
    [demo]  glfw, rendercanvas, pillow    the demo's window and its PNG snapshot (and rich)
    [dask]  dask[distributed]             engine-plugin bake --scheduler / --dask-local
    [all]   all of the above
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from .errors import PluginError

__all__ = ["EXTRAS", "MissingExtraError", "install_line", "require"]

# module -> the extra that installs it
EXTRAS = {
    "rich": "cli",
    "glfw": "demo",
    "rendercanvas": "demo",
    "PIL": "demo",
    "distributed": "dask",
    "dask": "dask",
}


class MissingExtraError(PluginError):
    """An optional dependency is not installed; the message names the extra that provides it."""

    def __init__(self, message: str, extra: str):
        self.extra = extra
        super().__init__(message)


def install_line(extra: str) -> str:
    """The pip command that installs ``extra``."""
    return f"pip install 'engine_plugin[{extra}]'"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, what: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that installs it.

    Args:
        module: the top-level module (``rich``, ``glfw``, ``PIL``...).
        what: what needs it, for the message (``"the bake summary"``).
        extra: the extra to name when the caller needs a larger one than ``module``'s own
            (the demo names ``demo``, which brings rich with the rest, not ``cli``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = extra or EXTRAS.get(module.split(".")[0], "all")
        raise MissingExtraError(
            f"{what} needs the optional '{extra}' extra ({module} is not installed: {exc}); install it with: {install_line(extra)}", extra
        ) from None
