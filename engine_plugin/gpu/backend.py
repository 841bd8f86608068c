"""The backend protocol every GPU backend implements, and the backend that refuses everything.

Upload, dispatch and readback answer whether the work was *accepted* (validated and
submitted), never whether the device has finished it. A refusal (``False``, or ``None`` from a
registration) always leaves the caller free to run the authoritative CPU path.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import ReadbackDataError, StaleSpanError
from .descriptors import DispatchDesc, FieldMirrorDesc, GpuCapabilities, ReadbackDesc, UploadDesc
from .handles import GpuProductHandle

__all__ = ["GpuBackend", "NoGpuBackend", "ReadbackCallback", "ReadbackResult", "ReadbackStatus", "ResourceBackend", "upload_spans"]


class ReadbackStatus(enum.Enum):
    """Where one accepted readback stands: ``PENDING`` until decided once, ``READY`` or ``FAILED``."""

    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class ReadbackResult:
    """What a readback callback receives.

    ``data`` is a read-only memoryview of the bytes when ``status`` is READY, else None. It is
    valid **only inside the callback**: the staging buffer behind it is unmapped and destroyed
    right after. Copy what you keep (``result.array(np.float32).copy()``). The callback may run
    after its product was unregistered: check ``backend.is_live(result.handle)`` and the world's
    content versions before applying anything.
    """

    handle: GpuProductHandle
    desc: ReadbackDesc
    status: ReadbackStatus
    data: memoryview | None
    request_id: int
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status is ReadbackStatus.READY

    def is_current(self, backend: Any, world: Any) -> bool:
        """Whether the result may still be applied: its product generation is live on
        ``backend`` and every chunk in ``desc.chunk_keys`` still has its ``desc.versions``."""
        if not backend.is_live(self.handle) or len(self.desc.chunk_keys) != len(self.desc.versions):
            return False
        return all(world.is_current(k, v) for k, v in zip(self.desc.chunk_keys, self.desc.versions, strict=True))

    def array(self, dtype: Any = np.uint8) -> np.ndarray:
        """The bytes as a read-only numpy array of ``dtype`` (callback-scoped like ``data``).

        Raises:
            ReadbackDataError: the readback did not succeed, or the callback has returned."""
        if self.data is None:
            raise ReadbackDataError(f"readback {self.request_id} {self.status.value}: no data ({self.message})")
        try:
            memoryview(self.data).nbytes  # noqa: B018  (raises once the memoryview is released; bytes from a test double too)
        except ValueError:
            raise ReadbackDataError(
                f"readback {self.request_id}: its data is valid only inside its callback (the staging buffer is unmapped after it); "
                "copy what you keep there: result.array(dtype).copy()"
            ) from None
        return np.frombuffer(self.data, dtype=dtype)


ReadbackCallback = Callable[[ReadbackResult], None]


@runtime_checkable
class GpuBackend(Protocol):
    """What the engine needs from a GPU backend. Calls are serialised by the caller (one engine
    thread); only :meth:`notify_device_error` may come from another thread."""

    def capabilities(self) -> GpuCapabilities:
        """What the backend can do now; all-zero once disabled or lost."""
        ...

    def register_field(self, desc: FieldMirrorDesc) -> bool:
        """Create the field's mirror; False when refused."""
        ...

    def register_product(self, key: Hashable, desc: Any) -> GpuProductHandle | None:
        """Register a product (backend-specific ``desc``); None when refused."""
        ...

    def unregister_product(self, handle: GpuProductHandle) -> bool:
        """Forget a product; its handle (and every descriptor carrying it) goes stale."""
        ...

    def is_live(self, handle: GpuProductHandle) -> bool:
        """Whether ``handle`` still names a registered product of this backend."""
        ...

    def upload(self, desc: UploadDesc) -> bool:
        """Copy a live world span to its mirror; raises StaleSpanError for a stale span."""
        ...

    def dispatch(self, desc: DispatchDesc) -> bool:
        """Validate and submit one dispatch."""
        ...

    def readback(self, desc: ReadbackDesc) -> bool:
        """Start one bounded asynchronous readback; its callback comes from a later ``poll``."""
        ...

    def poll(self) -> int:
        """Deliver finished readbacks to their callbacks without blocking; answers how many."""
        ...

    def notify_device_error(self, message: str = "") -> None:
        """Fail closed: refuse all further work and fail pending readbacks (any thread)."""
        ...

    def close(self) -> None:
        """Fail what is pending, release every resource; later calls are refused."""
        ...


@runtime_checkable
class ResourceBackend(GpuBackend, Protocol):
    """A backend the engine hands its own wgpu resources (``WgpuBackend`` and look-alikes):
    every member the engine calls beyond :class:`GpuBackend`. A fake implementing this is a
    complete stand-in at the engine's boundary."""

    device: Any  # the wgpu device the engine makes product resources on
    config: Any  # the backend's budgets (WgpuBackendConfig)
    last_refusal: str  # why the last refused call was refused

    @property
    def context(self) -> Any:
        """The DeviceContext the backend was made with (None for a bare device)."""
        ...

    @property
    def healthy(self) -> bool:
        """Whether work can be accepted (not closed, not disabled, no device error or loss)."""
        ...

    @property
    def fault(self) -> str | None:
        """Why the backend is disabled, or None while healthy."""
        ...

    @property
    def lost(self) -> bool:
        """Whether the device was lost (as opposed to a reported error)."""
        ...

    @property
    def inflight_readback_bytes(self) -> int:
        """Staging bytes of accepted readbacks not yet released (the byte budget's use)."""
        ...

    @property
    def serial_submits(self) -> bool:
        """Whether a submit waits for the previous submission (lavapipe): one frame in flight."""
        ...

    @property
    def timestamps(self) -> bool:
        """Whether batched dispatches are timed with timestamp queries."""
        ...

    def field_buffer(self, tag: str) -> Any | None:
        """The mirror buffer of a registered field, or None."""
        ...

    def unregister_field(self, tag: str) -> bool:
        """Forget a field (its buffer is released, never destroyed)."""
        ...

    def guarded(self, what: str, fn: Callable[[], Any]) -> Any | None:
        """Run ``fn`` (the caller's resource creation) fail-closed; None when disabled or failed."""
        ...

    def batch(self) -> Any:
        """A context manager recording dispatches and readbacks into one submission."""
        ...

    def gpu_times(self) -> list[dict[str, float]]:
        """GPU milliseconds per product key of each timed batch landed since the last call."""
        ...


class NoGpuBackend:
    """The dependency-free default backend: refuses every operation, so callers run on the CPU."""

    last_refusal = "NoGpuBackend refuses all GPU work"

    def capabilities(self) -> GpuCapabilities:
        return GpuCapabilities()

    def register_field(self, desc: FieldMirrorDesc) -> bool:
        return False

    def register_product(self, key: Hashable, desc: Any) -> GpuProductHandle | None:
        return None

    def unregister_product(self, handle: GpuProductHandle) -> bool:
        return False

    def is_live(self, handle: GpuProductHandle) -> bool:
        return False

    def upload(self, desc: UploadDesc) -> bool:
        return False

    def dispatch(self, desc: DispatchDesc) -> bool:
        return False

    def readback(self, desc: ReadbackDesc) -> bool:
        return False

    def poll(self) -> int:
        return 0

    def notify_device_error(self, message: str = "") -> None:
        return None

    def close(self) -> None:
        return None


def upload_spans(backend: Any, spans: Sequence[UploadDesc]) -> int:
    """Upload ``spans`` in order through ``backend``; answers how many were accepted (the
    spans before the first refusal: nothing after one is sent). A backend with an
    ``upload_spans`` method takes them at once (the wgpu backend checks its health once for
    them) when its ``upload_of_spans`` names its ``upload``; any other answers
    :meth:`ResourceBackend.upload` span by span."""
    many = getattr(backend, "upload_spans", None)
    # Only when ``upload`` is the one ``upload_spans`` does at once: an ``upload`` replaced on
    # the instance or overridden by a subclass is honoured span by span.
    if (
        many is not None
        and "upload" not in getattr(backend, "__dict__", ())
        and getattr(type(backend), "upload", None) is getattr(type(backend), "upload_of_spans", None)
    ):
        return int(many(spans))
    done = 0
    for desc in spans:
        try:
            if not backend.upload(desc):
                break
        except StaleSpanError as exc:
            exc.written = done
            raise
        done += 1
    return done
