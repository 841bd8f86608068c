"""The wgpu-py backend: field mirrors, uploads, generation-checked products, dispatch,
bounded asynchronous readback, and fail-closed device-error handling.

Ownership rules, each because the alternative aborts the process or leaks:

* A staging buffer belongs to exactly one accepted readback at a time and is released on
  every path (delivered, failed, backend closed first): into the ring's pool of idle buffers
  when its copy is over and the device is healthy (the next readback reuses it), else
  destroyed. Destroying it after its copy was *submitted* is safe (wgpu-core defers the free);
  only submitting work that uses a destroyed buffer aborts, and a pooled buffer is idle (its
  copy over, unmapped). The pool is destroyed on a fault or loss and at close.
* Field mirrors, pipelines and bind groups are never destroyed, only released: a product's
  bind group may still reference a field buffer.
* Command buffers are finished immediately before submission and never kept: submitting one
  finished before a device loss aborts the process, while ``finish()`` on a lost device raises.

Dispatches may carry writes into product-owned buffers (a work list, a params block), written
only when the dispatch is accepted; ``with backend.batch():`` records dispatches and readback
copies into one command buffer submitted once (see :mod:`engine_plugin.gpu.batch`).

Any wgpu error raised by a call of this backend disables it (fail closed), as does
:meth:`WgpuBackend.notify_device_error` and a "device lost" record on the ``wgpu`` logger
confirmed by a probe of this backend's own device (see :mod:`engine_plugin.device.loss`).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..device.destroyed import install as install_destroy_marks
from ..device.destroyed import unusable
from ..device.flags import COPY_DST as _COPY_DST
from ..device.flags import COPY_SRC as _COPY_SRC
from ..device.flags import MAP_READ as _MAP_READ
from ..device.flags import STORAGE as _STORAGE
from ..device.guard import guard_for
from ..device.loss import FaultState, loss_reports
from ..errors import StaleHandleError, StaleSpanError, bug
from ..world import World
from .batch import BatchRecorder
from .config import WgpuBackendConfig, WgpuProductDesc, product_refusal, readback_range, source_size
from .descriptors import DispatchDesc, FieldMirrorDesc, GpuCapabilities, ReadbackDesc, SpanList, UploadDesc, field_mirror_desc
from .handles import GpuProductHandle, SlotTable
from .ring import ReadbackRing, map_submitted

__all__ = ["WgpuBackend"]

log = logging.getLogger("engine_plugin.gpu")

T = TypeVar("T")


_ALIGN = 4


@dataclass
class _Field:
    desc: FieldMirrorDesc
    buffer: Any
    total: int = 0  # desc.total_bytes(), checked by every upload
    world: Any = None  # a weak reference to the last world whose field layout is this mirror's

    def layout_refusal(self, world: Any, tag: str) -> str | None:
        """Why ``world``'s field ``tag`` is not laid out as this mirror (another world's field
        of the same tag, of another dtype or chunk shape: its bytes landed mid-slot, review
        helper 189), or None; checked once per world."""
        if self.world is not None and self.world() is world:
            return None
        d = self.desc
        try:
            theirs = field_mirror_desc(world, tag)  # the mirror that world's field would register
        except Exception as exc:  # not a World, or no such field
            return f"its world has no field {tag!r} laid out as a mirror ({type(exc).__name__}: {exc})"
        # A slot's layout (a world of more chunks than the mirror has slots uploads the spans
        # that fit: the range check refuses the rest).
        if _slot_layout(theirs) != _slot_layout(d):
            return f"its world lays the field out as {_layout_text(theirs)}; the mirror was registered as {_layout_text(d)} (a span of another world?)"
        try:
            self.world = weakref.ref(world)  # not a strong one: the backend kept a dropped world's arrays alive (helper 191)
        except TypeError:  # no weak references to it: checked every time (a few attribute reads)
            self.world = None
        return None


def _span_refusal(desc: UploadDesc, stride: int) -> str | None:
    """Why a span's own numbers disagree with each other or with its world, or None.

    ``data()`` checks the versions of ``chunk_keys`` and sends the bytes of ``first_slot``'s
    slots to ``dst_offset``: a hand-made descriptor whose slots are not its chunks' passed the
    version check and wrote another slot's bytes, or bytes to another slot (review helper
    189). A chunk no longer live is left to ``data()``, which names it as stale."""
    first, count = desc.first_slot, desc.slot_count
    if desc.dst_offset != first * stride or desc.nbytes != count * stride:
        return (
            f"the span covers slots {first}..{first + count - 1} ({stride} B a slot: bytes {first * stride}+{count * stride}), "
            f"not bytes {desc.dst_offset}+{desc.nbytes} (a hand-made UploadDesc? take one from upload_desc or coalesce_uploads)"
        )
    world = desc.world
    slot, is_current = getattr(world, "slot", None), getattr(world, "is_current", None)
    if slot is None or is_current is None:
        return None
    for key, version in zip(desc.chunk_keys, desc.versions):
        try:
            if not is_current(key, version):
                # Changed, or evicted and added again (in another slot: review helper 198):
                # data() raises its StaleSpanError, as the docstring promises.
                continue
            at = slot(key)
        except LookupError:  # not live (UnknownChunkError is a KeyError): data() says it is stale
            continue
        if not first <= at < first + count:
            return f"chunk {key} lives in slot {at}, outside the span's slots {first}..{first + count - 1} (a hand-made UploadDesc? take one from upload_desc or coalesce_uploads)"
    return None


def _slot_layout(desc: FieldMirrorDesc) -> tuple:
    """What a mirror slot's bytes mean: the field's format, bytes and tiles a chunk."""
    return (desc.format, desc.bytes_per_chunk, desc.tiles_per_chunk)


def _layout_text(desc: FieldMirrorDesc) -> str:
    return f"{getattr(desc.format, 'name', desc.format)}, {desc.bytes_per_chunk} B and {desc.tiles_per_chunk} tiles a chunk"


@dataclass
class _Product:
    desc: WgpuProductDesc
    source_size: int


class WgpuBackend:
    """A :class:`~engine_plugin.gpu.backend.GpuBackend` over a wgpu device.

    Args:
        device: a ``wgpu.GPUDevice`` (or a :class:`~engine_plugin.device.context.DeviceContext`,
            or anything shaped like one: tests pass a fake).
        config: budgets; the defaults suit a frame loop.

    Calls are serialised by the caller (the engine thread); ``notify_device_error`` alone may
    come from any thread. Use as a context manager, or call :meth:`close`.

    Batches (``with backend.batch():``) are recorded by a
    :class:`~engine_plugin.gpu.batch.BatchRecorder` the backend owns, given its device, queue,
    guard, readback ring and timer and its fail-closed hooks.
    """

    def __init__(self, device: Any, config: WgpuBackendConfig | None = None):
        # A DeviceContext hands its device, and is marked lost with it so that get_context()
        # makes a new device next time.
        self._context = device if hasattr(device, "device") and hasattr(device, "lost") else None
        device = getattr(device, "device", device)
        # Destroyed buffers and the buffers bind groups bind are known from here on, for a raw
        # device too (a DeviceContext installs it; without one a destroyed buffer aborted the
        # process at submit, review helper 160).
        install_destroy_marks()
        # Every submission holds the device's submit lock and checks its loss flag first.
        self._guard = self._context.guard if self._context is not None else guard_for(device)
        self.config = config or WgpuBackendConfig()
        self.device = device
        self.queue = device.queue
        self._limits = dict(device.limits)
        # lavapipe (a CPU adapter): queue.submit waits for the previous submission to finish,
        # so a frame loop must not submit while work is in flight (the engine paces on it).
        adapter = getattr(self._context, "adapter", None)
        info = getattr(adapter, "info", None) or {}
        self.serial_submits = str(info.get("adapter_type", "")).lower() == "cpu"
        self._fields: dict[str, _Field] = {}
        self._products: SlotTable[_Product] = SlotTable(self.config.max_products)
        self._ring = ReadbackRing(
            self.config.max_inflight_readbacks, self.config.max_inflight_readback_bytes, self.config.waiter_slice_s, self.config.reuse_staging
        )
        self._faults = FaultState()
        self._faults.queue = self.queue
        self._closed = False
        self.last_refusal = ""
        self.stats = {"uploads": 0, "upload_bytes": 0, "dispatches": 0, "readbacks": 0, "refusals": 0}
        self._timer: Any = None  # a runtime.timing.GpuTimer when the adapter has timestamps
        loss_reports.acquire_user()
        if not self.config.enabled:
            self._faults.set("disabled by configuration", lost=False)
        else:
            self._warm_up(device)
        self._batches = BatchRecorder(
            device,
            self.queue,
            self._guard,
            self._ring,
            self._timer,
            timing_every=self.config.gpu_timing_every,
            healthy=lambda: self.healthy,
            fault=lambda: self.fault,
            fault_state=lambda: self._fault,
            closed=lambda: self._closed,
            refuse=self._refuse,
            device_exception=self._device_exception,
        )

    def _warm_up(self, device: Any) -> None:
        """The loss probe, the warmed readback path and the GPU timer (fail closed on error)."""
        try:
            self._faults.probe = device.create_buffer(size=_ALIGN, usage=_COPY_DST | _COPY_SRC, label="engine_plugin.probe")
            if self.config.warm_up:
                self._ring.warm_up(self.device, self._faults.probe)
            if self.config.gpu_timing:
                from ..runtime.timing import GpuTimer  # here: engine_plugin.gpu imports no wgpu

                timer = GpuTimer(device)
                self._timer = timer if timer.available else None
        except Exception as exc:
            self._device_exception("warming up the readback path", exc)

    @property
    def _fault(self) -> str | None:
        return self._faults.message

    @property
    def context(self) -> Any | None:
        """The :class:`~engine_plugin.device.context.DeviceContext` this backend was made with, if any."""
        return self._context

    def guarded(self, what: str, fn: Callable[[], T]) -> T | None:
        """Run ``fn`` (wgpu calls making a caller's resources on this device) fail-closed.

        A device error or loss raised by ``fn`` disables the backend, exactly as one raised by
        its own calls would, and answers None; a disabled backend answers None without calling
        ``fn``. Anything that is not a device error is re-raised (a caller's bug).
        """
        if not self._usable(what):
            return None
        try:
            return fn()
        except Exception as exc:
            self._device_exception(what, exc)
            return None

    # ---- state -----------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """Whether work can be accepted (not closed, not disabled, no device error or loss)."""
        return self._fault is None and not self._closed

    @property
    def lost(self) -> bool:
        """Whether this backend's device was lost (as opposed to a reported error)."""
        return self._faults.lost

    @property
    def fault(self) -> str | None:
        """Why the backend is disabled, or None while healthy."""
        return "closed" if self._closed else self._fault

    @property
    def inflight_readbacks(self) -> int:
        """Accepted readbacks whose staging is not released yet (the count budget's use)."""
        return self._ring.tracker.count

    @property
    def inflight_readback_bytes(self) -> int:
        return self._ring.tracker.bytes

    @property
    def live_staging_buffers(self) -> int:
        """Staging buffers created and not yet destroyed (0 once everything is delivered)."""
        return self._ring.live_staging

    @property
    def pooled_staging_buffers(self) -> int:
        """Idle staging buffers kept for reuse by later readbacks (destroyed at close)."""
        return self._ring.pooled

    @property
    def delivered_readbacks(self) -> int:
        """Callbacks run so far (READY and FAILED)."""
        return self._ring.delivered

    def capabilities(self) -> GpuCapabilities:
        if not self.healthy:
            return GpuCapabilities()
        return GpuCapabilities(
            compute=True,
            async_dispatch=True,
            async_readback=True,
            max_buffer_bytes=int(self._limits.get("max-buffer-size", 0)),
            max_workgroups_x=min(self.config.max_workgroups_x, int(self._limits.get("max-compute-workgroups-per-dimension", 65_535))),
            max_workgroups_per_dimension=int(self._limits.get("max-compute-workgroups-per-dimension", 65_535)),
            upload_alignment=_ALIGN,
            readback_alignment=_ALIGN,
        )

    def notify_device_error(self, message: str = "device error reported by the application") -> None:
        """Disable further submissions and fail every pending readback. Safe from any thread.

        The FAILED callbacks are delivered by the next :meth:`poll` on the engine thread.
        """
        self._set_fault(message, lost=False)

    def _set_fault(self, message: str, *, lost: bool) -> None:
        first = self._faults.set(message, lost=lost)
        self._ring.drop_pool()  # idle buffers only; a faulted backend reuses nothing
        if lost:
            self._ring.device_lost = True
            if self._context is not None:
                self._context.lost = True
        failed = self._ring.tracker.fail_all(message)
        if first:
            log.warning("GPU backend disabled (%s); %d pending readback(s) failed", message, failed)

    def _refuse(self, reason: str) -> bool:
        self.last_refusal = reason
        self.stats["refusals"] += 1
        return False

    def _unhealthy(self) -> bool:
        """Whether :meth:`_usable` may refuse: a fault, closed, an unseen loss report, or the
        device found lost. The healthy case (every upload, dispatch and readback of a frame)
        is decided without building the refusal message a call to ``_usable`` takes."""
        faults = self._faults
        return faults.message is not None or self._closed or loss_reports.count != faults.seen_reports or self._guard.lost

    def _usable(self, what: str) -> bool:
        """Check loss reports, then whether ``what`` may run; records the refusal if not."""
        if self._faults.new_loss_report():
            self._set_fault("device lost (reported on the wgpu logger, confirmed by a probe)", lost=True)
        if self._fault is None and self._guard.lost:  # destroyed, or found lost by another user
            self._set_fault(f"device lost ({self._guard.reason})", lost=True)
        if self._closed:
            return self._refuse(f"{what}: the backend is closed")
        if self._fault is not None:
            return self._refuse(f"{what}: the backend is disabled ({self._fault})")
        return True

    def _device_exception(self, what: str, exc: Exception) -> bool:
        """Fail closed on a device error (answering False); re-raise anything else (a bug)."""
        found = self._faults.describe(what, exc)
        if found is None:
            raise exc
        self._set_fault(found[0], lost=found[1])
        return self._refuse(found[0])

    # ---- fields ----------------------------------------------------------------------

    def register_field(self, desc: FieldMirrorDesc) -> bool:
        """Create the STORAGE | COPY_DST | COPY_SRC mirror buffer of ``desc``; False when refused."""
        _takes("register_field", desc, FieldMirrorDesc)
        if not self._usable(f"register_field({desc.tag!r})"):
            return False
        if desc.tag in self._fields:
            return self._refuse(f"field {desc.tag!r} is registered already")
        if len(self._fields) >= self.config.max_fields:
            return self._refuse(f"max_fields={self.config.max_fields} fields are registered already")
        size = -(-desc.total_bytes() // _ALIGN) * _ALIGN
        limit = int(self._limits.get("max-buffer-size", 0))
        if size > limit:
            return self._refuse(f"field {desc.tag!r} mirror needs {size} B; the device allows {limit} B a buffer")
        try:
            buffer = self.device.create_buffer(size=size, usage=_STORAGE | _COPY_DST | _COPY_SRC, label=f"engine_plugin.field.{desc.tag}")
        except Exception as exc:
            return self._device_exception(f"register_field({desc.tag!r})", exc)
        self._fields[desc.tag] = _Field(desc, buffer, desc.total_bytes())
        return True

    def field_buffer(self, tag: str) -> Any | None:
        """The mirror buffer of field ``tag`` (for the caller's bind groups), or None."""
        f = self._fields.get(tag)
        return f.buffer if f is not None else None

    def unregister_field(self, tag: str) -> bool:
        """Forget field ``tag``. Its buffer is released, never destroyed (bind groups may use it)."""
        return self._fields.pop(tag, None) is not None

    # ---- products --------------------------------------------------------------------

    def register_product(self, key: Hashable, desc: WgpuProductDesc) -> GpuProductHandle | None:
        """Register caller-made GPU resources under ``key``; answers a generation handle or None."""
        if not self._usable(f"register_product({key!r})"):
            return None
        try:
            hash(key)
        except TypeError:  # a raw TypeError from the registry before (review helper 189)
            self._refuse(f"register_product: the key {key!r} is not hashable (a name, a number or a tuple serves)")
            return None
        reason = product_refusal(desc, _COPY_SRC, _ALIGN) or self._resource_refusal(desc)
        if reason is not None:
            self._refuse(f"register_product({key!r}): {reason}")
            return None
        handle = self._products.insert(key, _Product(desc, source_size(desc)))
        if handle is None:
            full = len(self._products) >= self.config.max_products
            self._refuse(
                f"register_product({key!r}): "
                + (f"max_products={self.config.max_products} are registered" if full else "the key is registered already; unregister its handle first")
            )
        return handle

    def _resource_refusal(self, desc: WgpuProductDesc) -> str | None:
        """Why the product's own resources cannot serve this backend, or None: one of another
        device (its first readback failed as a device error and disabled the backend for good:
        review helper 189). Destroyed and still-mapped buffers are refused where they would be
        used (a dispatch, a readback): a buffer made mapped may be unmapped after registering,
        as WebGPU allows (helper 191)."""
        named = [("its readback source", desc.readback_source), ("its pipeline", desc.pipeline)]
        named += [("a writable buffer", b) for b in desc.writable] + [("a bind group", g) for g in desc.bind_groups]
        for what, obj in named:
            device = getattr(obj, "_device", None) if obj is not None else None
            # A device of the backend's own kind (a test double's invented ``_device`` is not one).
            if isinstance(device, type(self.device)) and device is not self.device:
                return f"{what} ({getattr(obj, 'label', '')!r}) lives on another device than this backend's"
        return None

    def unregister_product(self, handle: GpuProductHandle) -> bool:
        """Forget a product; ``handle`` and every descriptor carrying it go stale.

        Readbacks it already started still complete through their callback (check ``is_live``).
        """
        _takes("unregister_product", handle, GpuProductHandle)
        self._batches.forget_timing(str(handle.key))  # a product registered again is timed at once
        return self._products.remove(handle) is not None

    def is_live(self, handle: GpuProductHandle) -> bool:
        return isinstance(handle, GpuProductHandle) and self._products.get(handle) is not None

    def require_live(self, handle: GpuProductHandle) -> None:
        """Raise StaleHandleError naming ``handle`` when it no longer names a product."""
        if not self.is_live(handle):
            raise StaleHandleError(f"{handle} is stale: it was unregistered or replaced")

    # ---- uploads and dispatch --------------------------------------------------------

    def upload(self, desc: UploadDesc) -> bool:
        """Write a live world span into its field mirror with ``queue.write_buffer``.

        Refused: unknown field, misaligned offset or size (WebGPU needs 4-byte multiples), a
        range past the mirror. Raises StaleSpanError when the span's chunks changed since it
        was taken (never a silent stale upload).
        """
        _takes("upload", desc, UploadDesc)
        return self.upload_spans((desc,)) == 1

    upload_of_spans = upload  # upload_spans(d) is upload(d) for each d (see gpu.backend.upload_spans)

    def upload_spans(self, descs: Sequence[UploadDesc]) -> int:
        """:meth:`upload` of each span in order, answering how many were written: all of them,
        or those before the first refused one (nothing after a refusal is written). A frame's
        spans go through here at once: the checks that hold for all of them are made once.

        Raises:
            StaleSpanError: as :meth:`upload`, with the spans before it written.
        """
        faults = self._faults
        if self._unhealthy() and not self._usable(f"upload({descs[0].tag!r})" if descs else "upload"):
            return 0
        if self._batches.recorded:
            self._batches.flush()  # encoded dispatches must not see bytes written after them
            if not self.healthy:
                self._refuse(f"upload: the backend failed submitting its batch ({self.fault})")
                return 0
        if type(descs) is SpanList:
            f = self._fields.get(descs.tag)
            wrong = f.layout_refusal(descs.world, descs.tag) if f is not None else None
            if wrong is not None:
                self._refuse(f"upload of {descs.tag!r}: {wrong}")
                return 0
            whole = self._whole_mirror(descs)
            if whole is not None:
                return self._upload_span_list(descs, whole)
        write = self.queue.write_buffer
        fields = self._fields
        trusted = type(descs) is SpanList  # made from the world's own slot vectors (see _span_refusal)
        done = sent = 0
        try:
            for desc in descs:
                f = fields.get(desc.tag)
                if f is None:
                    self._refuse(f"upload: field {desc.tag!r} is not registered")
                    break
                wrong = f.layout_refusal(desc.world, desc.tag)
                if wrong is not None:
                    self._refuse(f"upload of {desc.tag!r}: {wrong}")
                    break
                offset, nbytes = desc.dst_offset, desc.nbytes
                if nbytes <= 0:  # reported as a bug of ours before (review helper 189)
                    self._refuse(f"upload of {desc.tag!r}: an empty span ({nbytes} bytes)")
                    break
                if offset % _ALIGN or nbytes % _ALIGN:
                    self._refuse(f"upload of {desc.tag!r}: offset {offset} / size {nbytes} not {_ALIGN}-byte aligned")
                    break
                if offset < 0 or offset + nbytes > f.total:
                    self._refuse(f"upload of {desc.tag!r}: bytes {offset}+{nbytes} outside the mirror")
                    break
                wrong = None if trusted else _span_refusal(desc, f.desc.slot_stride)
                if wrong is not None:
                    self._refuse(f"upload of {desc.tag!r}: {wrong}")
                    break
                try:
                    data = desc.data()  # StaleSpanError before anything of this span reaches the device
                except StaleSpanError as exc:
                    exc.written = done
                    raise
                if data.nbytes != nbytes:
                    raise bug(f"upload span of {desc.tag!r} has {data.nbytes} B, its descriptor says {nbytes}")
                if faults.message is not None:  # a notify from another thread landed meanwhile
                    self._refuse(f"upload({desc.tag!r}): the backend is disabled ({faults.message})")
                    break
                try:
                    write(f.buffer, offset, data)
                except Exception as exc:
                    self._device_exception(f"upload({desc.tag!r})", exc)  # re-raises what is not the device's
                    break
                done += 1
                sent += nbytes
        finally:  # the spans written count, also when a stale one raised
            stats = self.stats
            stats["uploads"] += done
            stats["upload_bytes"] += sent
        return done

    def _whole_mirror(self, spans: SpanList) -> np.ndarray | None:
        """The world's whole array of the spans' field when a span's bytes are rows of it
        (a :class:`World` whose ``slab`` and ``mirror`` are its own, a registered field,
        unpadded slot-major rows of the mirror's stride), else None."""
        world = spans.world
        # Only World's own rows: a subclass (or another world type) answering other bytes from
        # ``slab`` than ``mirror``'s rows takes the per-span path, which writes ``slab``.
        cls = type(world)
        if cls is not World and (getattr(cls, "slab", None) is not World.slab or getattr(cls, "mirror", None) is not World.mirror):
            return None
        if spans.padded or spans.tag not in self._fields or spans.clock is None or spans.stride % _ALIGN:
            return None
        whole = world.mirror(spans.tag)
        return whole if whole.flags.c_contiguous and whole.ndim and whole.strides[0] == spans.stride else None

    def _upload_span_list(self, spans: SpanList, whole: np.ndarray) -> int:
        """:meth:`upload_spans` of a field's :class:`SpanList`, with the same checks in the
        same order, made over its vectors: one range check (spans ascend by slot); chunks
        checked current right before each span is written, as a span's ``data()`` does, but
        through the world's mutation clock: the versions are compared (every remaining chunk
        at once) only when the clock moved. Each span's bytes are a row slice of the field's
        ``whole`` array; a descriptor is made only for a span that is refused."""
        f = self._fields[spans.tag]
        world, firsts, counts, stride = spans.world, spans.firsts, spans.slot_counts, spans.stride
        stop = len(firsts)
        while stop and (firsts[stop - 1] + counts[stop - 1]) * stride > f.total:
            stop -= 1  # past the mirror's end: refused, with every span after it
        from ..device.writes import row_writer  # (here: importing the gpu package does not import wgpu)

        write, faults = row_writer(self.queue, f.buffer, whole), self._faults
        verified, stale = spans.clock, None  # every chunk was current at the clock the spans were taken at
        done = sent = 0
        try:
            while done < stop:
                now = world.clock
                if now != verified:  # read before the check: a change during it moves the clock again
                    stale, verified = spans.stale_at(done), now
                if stale == done:
                    break
                if faults.message is not None:  # a notify from another thread landed meanwhile
                    self._refuse(f"upload({spans.tag!r}): the backend is disabled ({faults.message})")
                    return done
                first, count = firsts[done], counts[done]
                try:
                    write(first, count)
                except Exception as exc:
                    self._device_exception(f"upload({spans.tag!r})", exc)  # re-raises what is not the device's
                    return done
                done += 1
                sent += count * stride
            if done < len(firsts):
                desc = spans[done]
                if done == stop:  # a span's range is checked before its chunks
                    self._refuse(f"upload of {desc.tag!r}: bytes {desc.dst_offset}+{desc.nbytes} outside the mirror")
                    return done
                try:
                    desc.data()  # raises the span's StaleSpanError, naming the chunk
                except StaleSpanError as exc:
                    exc.written = done
                    raise
                raise bug(f"upload span {done} of {spans.tag!r} was found stale, but its chunks are current")
        finally:  # the spans written count, also when a stale one raised
            stats = self.stats
            stats["uploads"] += done
            stats["upload_bytes"] += sent
        return done

    def dispatch(self, desc: DispatchDesc) -> bool:
        """Validate (generation, field, chunk budget, workgroup limits), encode a compute pass
        and submit it. Answers whether it was submitted, not whether it finished."""
        if self._unhealthy() and not self._usable(f"dispatch({desc.product})"):
            return False
        product = self._products.get(desc.product)
        if product is None:
            return self._refuse(f"dispatch: {desc.product} is stale or was never registered here")
        if desc.field not in self._fields:
            return self._refuse(f"dispatch: field {desc.field!r} is not registered")
        if product.desc.fields and desc.field not in product.desc.fields:
            return self._refuse(f"dispatch: {desc.product} does not read field {desc.field!r}")
        if not 1 <= desc.chunk_count <= self.config.max_chunks_per_dispatch:
            return self._refuse(f"dispatch: chunk_count {desc.chunk_count} outside 1..{self.config.max_chunks_per_dispatch} (max_chunks_per_dispatch)")
        groups = desc.workgroups if isinstance(desc.workgroups, tuple) else (desc.workgroups, 1, 1)
        x, y, z = groups
        per_dim = int(self._limits.get("max-compute-workgroups-per-dimension", 65_535))
        if min(x, y, z) < 1:
            return self._refuse(f"dispatch: workgroups {desc.workgroups} must all be >= 1")
        if x > min(self.config.max_workgroups_x, per_dim):
            return self._refuse(f"dispatch: {x} workgroups in X exceed the limit {min(self.config.max_workgroups_x, per_dim)}")
        if max(y, z) > per_dim:
            return self._refuse(f"dispatch: workgroups {desc.workgroups} exceed the device's {per_dim} a dimension")
        if desc.prepared is not None:
            records = desc.prepared.records
            if not records or records[-1][0] is not product.desc.pipeline or tuple(records[-1][3]) != groups:
                return self._refuse(f"dispatch of {desc.product}: the prepared run is not of the product's pipeline and workgroups")
        writes = self._dispatch_writes(desc, product)
        if isinstance(writes, str):
            return self._refuse(f"dispatch of {desc.product}: {writes}")
        records = self._dispatch_records(desc, product)
        gone = self._unusable(product, records, self._fields[desc.field].buffer)
        if gone is not None:
            return self._refuse(f"dispatch of {desc.product}: {gone}")
        if self._batches.open:
            if not self._batches.dispatch(desc, writes, records):
                return False
            self.stats["dispatches"] += 1
            return True
        try:
            for buffer, offset, data in writes:
                self.queue.write_buffer(buffer, offset, data)
            if not self.healthy:  # a notify from another thread landed meanwhile
                return self._refuse(f"dispatch: the backend was disabled while encoding ({self.fault})")
            from ..runtime.submission import flush_open_batches, submit_records  # here: engine_plugin.gpu imports no wgpu

            flush_open_batches()  # runs an open abi.batch() recorded first: a prepared run may read them
            submit_records(self.device, self.queue, self._guard, records, f"dispatch.{desc.product.key}")
        except Exception as exc:
            return self._device_exception(f"dispatch({desc.product})", exc)
        finally:
            if desc.prepared is not None:
                desc.prepared.submitted()
        self.stats["dispatches"] += 1
        return True

    @staticmethod
    def _unusable(product: _Product, records: list, field_buffer: Any) -> str | None:
        """Why a dispatch would use a destroyed or still-mapped buffer or texture (its bind
        groups, the field mirror it reads, its readback source), or None: wgpu-native aborts
        the process on submitting one, and a caller-made product's buffers are the caller's
        to destroy or map (review helpers 159, 189)."""
        from ..runtime.submission import unusable_in  # here: engine_plugin.gpu imports no wgpu

        for what, obj in (("the field mirror it reads", field_buffer), ("its readback source", product.desc.readback_source)):
            why = unusable(obj) if obj is not None else None
            if why is not None:
                return f"{what} {getattr(obj, 'label', '')!r} {why}"
        found = unusable_in(records)
        if found is not None:
            return f"a buffer or texture it binds ({getattr(found, 'label', '')!r}) {unusable(found)}"
        return None

    @staticmethod
    def _dispatch_records(desc: DispatchDesc, product: _Product) -> list:
        """The submission records of one accepted dispatch: a prepared run's own (bound by the
        ABI runtime), or the registered pipeline and bind groups (see runtime.submission)."""
        if desc.prepared is not None:
            return desc.prepared.records
        offsets = product.desc.dynamic_offsets
        groups = tuple((group, list(offsets[i]) if i < len(offsets) and offsets[i] else None) for i, group in enumerate(product.desc.bind_groups))
        return [(product.desc.pipeline, groups, None, desc.workgroups, [])]

    def batch(self) -> AbstractContextManager[None]:
        """Record the dispatches and readbacks made inside into one command buffer, submitted
        once at exit; the readbacks' maps start after it. Nested batches join the outer one.

        Each call still answers acceptance at once (validated and encoded). A submission that
        fails fails closed like any other: its readbacks complete FAILED through their
        callbacks, and its dispatches never ran. See :mod:`engine_plugin.gpu.batch` for the
        ordering rules (writes or uploads that would overtake encoded work flush first).
        """
        return self._batches.batch()

    def gpu_times(self) -> list[dict[str, float]]:
        """GPU milliseconds per product key of each batch whose timestamps have landed since
        the last call (oldest first); empty without ``timestamp-query``. Never blocks."""
        if self._timer is None or self._closed:
            return []
        return self._timer.poll()

    @property
    def timestamps(self) -> bool:
        """Whether batched dispatches are timed on the GPU (the adapter has timestamp queries)."""
        return self._timer is not None

    @staticmethod
    def _dispatch_writes(desc: DispatchDesc, product: _Product) -> list[tuple[Any, int, Any]] | str:
        """The validated writes of ``desc`` (contiguous arrays or bytes), or why they are refused."""
        out = []
        for buffer, offset, data in desc.writes:
            if not any(buffer is b for b in product.desc.writable):
                return f"write into {getattr(buffer, 'label', buffer)!r}, which the product did not declare writable"
            if isinstance(data, np.ndarray):
                if not data.flags.c_contiguous:
                    data = np.ascontiguousarray(data)
                nbytes = data.nbytes
            else:
                data = memoryview(data).cast("B")
                nbytes = data.nbytes
            if offset < 0 or offset % _ALIGN or nbytes % _ALIGN:
                return f"write of {nbytes} B at {offset} is not {_ALIGN}-byte aligned"
            if offset + nbytes > int(buffer.size):
                return f"write of {nbytes} B at {offset} is past the {buffer.size} B buffer"
            if nbytes:
                out.append((buffer, offset, data))
        return out

    # ---- readback --------------------------------------------------------------------

    def readback(self, desc: ReadbackDesc) -> bool:
        """Copy the requested range into a MAP_READ staging buffer (an idle pooled one, or a
        new one) and start mapping it.

        Accepted requests complete through the product's callback from a later :meth:`poll`,
        exactly once, READY or FAILED. Refused: stale product, NONE policy, FULL_FIELD unless
        configured, missing selection, bad range, or a count/bytes budget that would overflow.
        """
        if self._unhealthy() and not self._usable(f"readback({desc.product})"):
            return False
        product = self._products.get(desc.product)
        if product is None:
            return self._refuse(f"readback: {desc.product} is stale or was never registered here")
        field = self._fields.get(desc.field) if desc.field is not None else None
        found = readback_range(
            desc, product.desc, product.source_size, (field.buffer, field.desc.total_bytes()) if field else None, self.config.allow_full_field, _ALIGN
        )
        if isinstance(found, str):
            return self._refuse(f"readback of {desc.product}: {found}")
        source, base, size = found
        gone = unusable(source)  # copying from it would abort the process (review helpers 159, 189)
        if gone is not None:
            return self._refuse(f"readback of {desc.product}: its source {getattr(source, 'label', '')!r} {gone}")
        why = self._ring.tracker.refusal(size)
        if why is not None:
            return self._refuse(f"readback of {desc.product}: {why}")
        if self._batches.open:
            # readback_range refused a product without a callback: it has one here
            if not self._batches.readback(desc, product.desc.callback, source, base, size):  # type: ignore[arg-type]
                return False
            self.stats["readbacks"] += 1
            return True
        staging = None
        try:
            staging = self._ring.create_staging(self.device, size, _MAP_READ | _COPY_DST)
            encoder = self.device.create_command_encoder()  # unlabelled (cost, see runtime.submission)
            encoder.copy_buffer_to_buffer(source, base, staging, 0, size)
            if not self.healthy:
                self._ring.destroy_staging(staging)
                return self._refuse(f"readback: the backend was disabled while encoding ({self.fault})")
            with self._guard.submitting("readback"):
                self.queue.submit([encoder.finish()])
                promise = map_submitted(staging, size)
        except Exception as exc:
            if staging is not None:  # never submitted, or its copy is: destroying is safe
                self._ring.destroy_staging(staging)
            return self._device_exception(f"readback({desc.product})", exc)
        if promise is None:  # the reference's "null map future": release at once
            self._ring.destroy_staging(staging)
            return self._refuse(f"readback of {desc.product}: map_async gave no promise")
        self._ring.start(desc.product, desc, product.desc.callback, size, staging, promise, lambda: self._fault)  # type: ignore[arg-type]
        self.stats["readbacks"] += 1
        return True

    def poll(self) -> int:
        """Deliver every finished readback to its callback; never blocks. Answers how many.

        Call once a frame on the engine thread. A callback's exception does not stop the
        delivery of the others or the release of staging; the first one is re-raised at the end.
        """
        if self._closed:
            return 0
        if self._faults.new_loss_report():
            self._set_fault("device lost (reported on the wgpu logger, confirmed by a probe)", lost=True)
        if self._fault is None and self._guard.lost:
            self._set_fault(f"device lost ({self._guard.reason})", lost=True)
        self._check_stall()
        errors: list[BaseException] = []
        count = self._ring.collect(errors)
        if errors:
            raise errors[0]
        return count

    def _check_stall(self) -> None:
        """Probe the device when a readback has been pending suspiciously long (see config)."""
        if self._fault is not None or not self._ring.tracker.count:
            return
        now = time.perf_counter()
        if (
            self._ring.tracker.oldest_pending_age() > self.config.stall_probe_s
            and now - self._faults.last_probe > self.config.stall_probe_s
            and self._faults.probe_lost()
        ):
            self._set_fault("device lost (found by probing a stalled readback)", lost=True)

    # ---- shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Fail every pending readback (callbacks run here, FAILED), destroy every staging
        buffer, release fields and products, stop the waiter. Idempotent; never blocks long."""
        if self._closed:
            return
        self._closed = True  # before the callbacks: one that re-enters is refused
        errors: list[BaseException] = []
        self._ring.close("the backend was closed", errors, self.config.close_wait_s)
        self._fields.clear()
        self._products.clear()
        self._faults.probe = None
        loss_reports.release_user()
        if errors:
            raise errors[0]

    def __enter__(self) -> WgpuBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "healthy" if self.healthy else f"disabled: {self.fault}"
        return f"<WgpuBackend {state}; {len(self._fields)} fields, {len(self._products)} products, {self.inflight_readbacks} readbacks in flight>"


def _takes(call: str, value: Any, kind: type) -> None:
    """A TypeError naming what ``call`` takes, for a value of another type (a bare
    AttributeError from deep inside before: review helper 183)."""
    if not isinstance(value, kind):
        raise TypeError(f"{call} takes a {kind.__name__}, not {type(value).__name__}")
