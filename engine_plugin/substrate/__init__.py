"""Arena pages and column runs: a kernel binds each page once and reaches its runs by offset.

    Substrate(device=None, page_bytes=...)   pages of u32 words (atomic pages apart)
      .alloc(element, count, atomic=False, name=None) -> RunHandle
      .free(handle) / .placement(handle) -> (page, base_word, length)
      .write(handle, array) / .read(handle) / handle.read_back()
      with .with_page_group(key): ...        the same shapes in the same order, the same pages
    page_binding(lowered, {column: handle | name | GPUBuffer}) -> PageBinding(pages, params)

Errors: SubstrateError (PluginError, ValueError) for bad arguments; StaleRunError
(StaleHandleError) for a freed run; PageBindingError for columns that cannot bind, and
StaleColumnError (both) for a freed run handed to a kernel's column.
"""

from .binding import PageBinding, page_binding
from .handles import Placement, RunHandle, StaleColumnError, StaleRunError, SubstrateError
from .pages import PageGroup
from .substrate import DEFAULT_PAGE_BYTES, PAGE_USAGE, Substrate, find_run, live_substrates

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "PAGE_USAGE",
    "PageBinding",
    "PageGroup",
    "Placement",
    "RunHandle",
    "StaleColumnError",
    "StaleRunError",
    "Substrate",
    "SubstrateError",
    "find_run",
    "live_substrates",
    "page_binding",
]
