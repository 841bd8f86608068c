"""GPU descriptors and backends (SPEC section 3; reference: the tile-world GPU backend layer).

Deterministic CPU results stay authoritative; derived work may go to an optional GPU. The
descriptors, the :class:`GpuBackend` protocol and :class:`NoGpuBackend` are dependency-free;
:class:`WgpuBackend` runs them on a wgpu device. Every upload/dispatch/readback answers whether
it was *accepted*; a refusal leaves the caller on the CPU path.

Importing this package does not import wgpu: ``world`` depends on :mod:`.formats`, and a
CPU-only engine may never touch a device. ``get_context``/``DeviceContext`` (which do) load on
first use.

Modules: ``formats`` (GpuFieldFormat), ``descriptors`` (mirror/upload/dispatch/readback
descriptors, capabilities), ``handles`` (generation handles), ``backend`` (protocol,
NoGpuBackend, readback results), ``config`` (budgets, product descriptions),
``wgpu_backend``, ``ring``/``readback`` (bounded asynchronous readback), ``loss`` (device loss
detection), ``device`` (device acquisition).
"""

from typing import Any

from ..errors import StaleSpanError  # SPEC section 3 names it with the upload descriptors
from ..formats import GpuFieldFormat, UnsupportedFieldTypeError
from .backend import GpuBackend, NoGpuBackend, ReadbackCallback, ReadbackResult, ReadbackStatus
from .config import WgpuBackendConfig, WgpuProductDesc
from .descriptors import (
    DispatchDesc,
    FieldMirrorDesc,
    GpuCapabilities,
    GpuDescriptorError,
    ReadbackDesc,
    ReadbackPolicy,
    UploadDesc,
    coalesce_uploads,
    field_mirror_desc,
    take_dirty_uploads,
    upload_desc,
)
from .handles import GpuProductHandle
from .wgpu_backend import WgpuBackend

__all__ = [
    "DeviceContext",
    "DispatchDesc",
    "FieldMirrorDesc",
    "GpuBackend",
    "GpuCapabilities",
    "GpuDescriptorError",
    "GpuFieldFormat",
    "GpuProductHandle",
    "NoGpuBackend",
    "ReadbackCallback",
    "ReadbackDesc",
    "ReadbackPolicy",
    "ReadbackResult",
    "ReadbackStatus",
    "StaleSpanError",
    "UnsupportedFieldTypeError",
    "UploadDesc",
    "WgpuBackend",
    "WgpuBackendConfig",
    "WgpuProductDesc",
    "coalesce_uploads",
    "field_mirror_desc",
    "get_context",
    "take_dirty_uploads",
    "upload_desc",
]

_FROM_DEVICE = ("DeviceContext", "get_context")


def __getattr__(name: str) -> Any:
    # device.py imports wgpu; load it only when someone asks for a device.
    if name in _FROM_DEVICE:
        from ..device import context as device

        return getattr(device, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
