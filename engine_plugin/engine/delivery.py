"""Steps 5 and 6 of the :class:`~engine_plugin.engine.Engine` frame: completed readbacks are
revalidated against the world and applied or discarded (counted); CPU fallbacks compute
what the GPU could not serve.

An object the engine owns (:class:`Delivery`); it owns the completed readbacks waiting for
step 5, the callback errors waiting for the end of the frame and the change-version vectors
of ``revalidate="fields"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ..gpu.backend import ReadbackResult
from ..gpu.descriptors import DirtyChanges, ReadbackPolicy
from .contract import ProductError, ProductResult, ProductWork
from .products import InFlight, Product, fallback_view, split_current
from .records import decode_outputs, fallback_outputs, fallback_overflow
from .stats import FrameStats

if TYPE_CHECKING:
    from .gpu_side import GpuSide

__all__ = ["Delivery"]

log = logging.getLogger("engine_plugin.engine")


class Delivery:
    """Readback delivery, revalidation, ``apply`` calls and CPU fallbacks.

    Args:
        world: the authoritative CPU data.
        config: the engine's :class:`~engine_plugin.engine.EngineConfig`.
        products: the engine's product table (a result whose product left it is discarded).
        gpu: the engine's :class:`~engine_plugin.engine.gpu_side.GpuSide` (the backend, and
            releasing a product's GPU side when its readbacks keep failing).
        engine_params: the engine-filled kernel params of the world (read only).
    """

    def __init__(self, world: Any, config: Any, products: Any, gpu: GpuSide, engine_params: Mapping[str, Any], dirty_token: int | None = None) -> None:
        self._world = world
        self.dirty_token = dirty_token  # the engine's own dirty flags (World.claim_dirty), if not the world's
        self._config = config
        self._products = products
        self._gpu = gpu
        self._engine_params = engine_params
        self._changed_at: dict[str, np.ndarray] = {}  # field -> world version of its last change, by slot
        # (result, decoded outputs or None when it failed, appends past capacity: name -> attempted)
        self._completed: list[tuple[ReadbackResult, Any, dict[str, int]]] = []
        self._voided = 0  # readbacks recover_gpu dropped undelivered: the next frame counts them stale
        self._errors: list[BaseException] = []

    @property
    def waiting(self) -> bool:
        """Whether completed readbacks wait for the next delivery (step 5)."""
        return bool(self._completed)

    def take_error(self) -> BaseException | None:
        """The first exception a callback raised since the last call (the others are dropped)."""
        if not self._errors:
            return None
        error, self._errors = self._errors[0], []
        return error

    def on_readback(self, result: ReadbackResult) -> None:
        """The backend's callback (inside ``backend.poll``): keep a copy, decide later."""
        inflight: InFlight = result.desc.user
        self._gpu.readback_landed(inflight.frame)
        if result.ok:
            # The plan of the request, not the product's now: a reload may have changed it.
            items = int(inflight.work.items.size)
            outputs, overflow = decode_outputs(inflight.plan, inflight.layout, result.data, items)  # type: ignore[arg-type]
            self._completed.append((result, outputs, overflow))
        else:
            self._completed.append((result, None, {}))

    def poll(self) -> None:
        """Let the backend complete finished readbacks (into :meth:`on_readback`); an exception
        is kept for the end of the frame."""
        try:
            self._gpu.backend.poll()
        except Exception as exc:  # our callback only copies; anything else is the backend's
            self._errors.append(exc)

    def reowe_completed(self) -> None:
        """The completed readbacks not delivered yet owe their chunks again, unapplied (their
        backend was replaced: their generations are void)."""
        for result, _, _ in self._completed:
            inflight: InFlight = result.desc.user
            inflight.product.inflight = max(0, inflight.product.inflight - 1)
            inflight.product.reowe(self._world, inflight.work.keys, failed=inflight.work)
            self._voided += 1
        self._completed.clear()

    def collect(self, st: FrameStats) -> None:
        """Step 5: deliver finished readbacks; apply what is still current."""
        self.poll()
        self.deliver_completed(st)

    def deliver_completed(self, st: FrameStats) -> None:
        """Deliver the readbacks completed so far, without polling the backend (what
        :meth:`collect` does after its poll; ``Engine.close`` counts the ones its backend's
        close failed so)."""
        if self._voided:  # requested, never applied: void with their backend (recover_gpu)
            st.readbacks_stale += self._voided
            self._voided = 0
        completed, self._completed = self._completed, []
        for i, (result, records, overflow) in enumerate(completed):
            try:
                self._deliver(result, records, st, overflow)
            except BaseException:
                # An interrupt in a callback (a callback's Exception is kept, not raised): the
                # results after it are delivered by the next frame's step 5, never dropped
                # with their products' in-flight counts (review helper 146).
                self._completed[:0] = completed[i + 1 :]
                raise

    def _deliver(self, result: ReadbackResult, records: Any, st: FrameStats, overflow: dict[str, int] | None = None) -> None:
        inflight: InFlight = result.desc.user
        product, work = inflight.product, inflight.work
        product.inflight = max(0, product.inflight - 1)
        registered = self._products.get(product.handle) is product  # type: ignore[arg-type]
        live = (
            registered
            and product.gpu is not None
            and product.gpu.handle == inflight.gpu_handle
            and self._gpu.backend.is_live(inflight.gpu_handle)
            and inflight.epoch == product.epoch  # a result of an older selection is void
        )
        if records is None:
            st.readbacks_failed += 1
            if registered:
                healthy = live and getattr(self._gpu.backend, "healthy", False)  # not a loss: that fails everything
                if healthy and product.plan is not None and product.plan.written_fields and product.cpu_fallback is not None:
                    # Its kernel ran (the map failed, not the dispatch) and wrote the mirror:
                    # running it over these chunks again would apply its write twice (review
                    # helper 150). Its fallback serves them in step 6, as for a refused readback.
                    product.pending.update(k for k in work.keys if k in self._world)
                    # Its kernel wrote the mirror for the versions it ran over: a chunk changed
                    # since (in a field it reads) is not written for its new version, and stays
                    # owed to its kernel, its readers waiting. Counted as written, its fallback
                    # served the new version and a reader applied the old mirror's value as
                    # current, for good (review helper 236: 48 where 80 is right).
                    current = self._revalidator(product) or self._world.is_current
                    product.gpu_written.update(k for k, v in zip(work.keys, work.versions) if current(k, v))
                    product.force_cpu = True
                else:
                    product.reowe(self._world, work.keys, failed=work)
                if healthy:
                    self._note_failure(product, st)
            return
        if live:
            product.readback_failures = 0
        else:
            st.readbacks_stale += 1
            st.chunks_stale += len(work.keys)
            if registered:  # released under it (a refused upload, a reload): owed, never lost
                product.reowe(self._world, work.keys, failed=work)
            return
        made, applied, stale = split_current(
            product,
            self._world,
            work,
            records,
            product.handle,  # type: ignore[arg-type]
            inflight.gpu_handle.generation,
            "gpu",
            inflight.frame,
            self._revalidator(product),
        )
        st.chunks_stale += len(stale)
        if product.cpu_done:  # (empty while the GPU serves it: a pop a chunk a frame otherwise)
            for k in applied:  # the GPU's result is the latest now: a fallback computing k again is not a repeat
                product.cpu_done.pop(k, None)
        # A whole-dispatch output discarded for one changed chunk discards the others' results
        # too: they are owed again (a path's work always covers the whole path anyway).
        whole = made is None and product.policy is not ReadbackPolicy.SELECTED_PATH and len(stale) == len(work.keys)
        product.reowe(self._world, stale, failed=work if whole else None)  # recomputed from their new content (once)
        if made is None:
            st.readbacks_stale += 1
            return
        st.readbacks_applied += 1
        st.chunks_applied += len(applied)
        if overflow:
            made = _overflowed(product, made, overflow, st)
        self._call_apply(product, made)

    def _note_failure(self, product: Product, st: FrameStats) -> None:
        """A readback of a healthy backend failed: after ``max_readback_failures`` in a row the
        product leaves the GPU for its CPU fallback, reported once (log and FrameStats)."""
        product.readback_failures += 1
        if product.readback_failures < self._config.max_readback_failures:
            return
        product.gave_up = True
        self._gpu.release(product)
        st.readback_fallbacks += 1
        served = "it runs on its CPU fallback" if product.cpu_fallback is not None else "it has no CPU fallback: its results wait"
        why = ProductError(f"product {product.key!r}: {product.readback_failures} readbacks failed in a row; {served} until engine.recover_gpu()")
        product.fail(why, off_gpu=True)  # product_error says so (a product without a fallback was stuck saying nothing)
        log.warning("%s", why)

    def _changes_of(self, name: str) -> np.ndarray:
        """When field ``name`` of each slot last changed, as far as this engine knows. A field
        first seen here (another engine may have consumed its dirty flags) starts at each
        chunk's current content version: older results count as changed, never as current."""
        at = self._changed_at.get(name)
        if at is None:
            versions = getattr(self._world, "slot_versions", None)
            if versions is not None:
                at = np.asarray(versions(np.arange(self._world.max_chunks)), dtype=np.int64).copy()
            else:
                at = np.zeros(self._world.max_chunks, dtype=np.int64)
                for k in self._world.keys():
                    at[self._world.slot(k)] = self._world.version(k)
            self._changed_at[name] = at
        return at

    def _revalidator(self, product: Product) -> Any:
        """``is_current(key, version)`` for ``product``'s results: the chunk's content version
        (``revalidate="chunk"``, SPEC section 4), or, with ``revalidate="fields"``, that none of
        the fields the product reads changed since ``version`` (other fields may have)."""
        writes_mirror = product.plan is not None and bool(product.plan.written_fields)
        if self._config.revalidate != "fields" and not writes_mirror:
            return None
        # A kernel that writes its mirror changes GPU state each run: discarding its result for
        # a change to a field it does not read, and running it over the chunk again, applied
        # its write twice (review helper 150: g = 3 + 1 became 5). Its results are revalidated
        # by the fields it reads, whatever ``revalidate`` says.
        world = self._world
        # The fields it reads, not those behind a kernel-written mirror among them: a result over
        # m1 = k a + 1 may land once after a changed (corrected the frame after, review helper
        # 158); counting a would never apply a reader of a simulation whose input the game
        # writes every frame (the demo's summary over its heat).
        names = product.field_names
        changed = {f: self._changes_of(f) for f in names}
        token = self.dirty_token
        is_dirty = world.is_dirty if token is None else partial(world.is_dirty, consumer=token)

        def fields_current(key: int, version: int) -> bool:
            if key not in world:
                return False
            slot = world.slot(key)
            if any(changed[f][slot] > version for f in names):
                return False
            # A dirty flag is a change not taken yet, unless the chunk's content is still the
            # version the result was computed from: ``mark_dirty`` (a re-upload) changes
            # nothing, and such a result is current (refused, nothing would owe it again).
            return world.version(key) == version or not any(is_dirty(key, f) for f in names)

        return fields_current

    def note_changes(self, name: str, changes: DirtyChanges) -> None:
        """Remember when field ``name`` of the chunks a take answered (a :class:`DirtyChanges`)
        last changed (``revalidate="fields"``): the versions the take read after clearing their
        dirty flags, at least as new as the change (a later "changed at" only refuses more
        results as stale), never another field's take's or a lookup's."""
        at = self._changes_of(name)
        if changes.slots is not None and changes.versions is not None:
            at[changes.slots] = changes.versions
            return
        world = self._world
        for k in changes.keys:
            with contextlib.suppress(KeyError):  # evicted meanwhile (another thread): nothing of it is current
                at[world.slot(k)] = world.version(k)

    def _call_apply(self, product: Product, result: ProductResult) -> None:
        if product.apply is None:
            return
        try:
            product.apply(result)
        except Exception as exc:
            self._errors.append(exc)

    def fallback(self, product: Product, st: FrameStats) -> None:
        """Step 6: compute the owed work on the CPU and apply it (current by construction)."""
        product.force_cpu = False
        if product.cpu_fallback is None:
            if not product.warned_no_fallback:
                product.warned_no_fallback = True
                log.warning("product %r has no CPU fallback: its results wait for the GPU", product.key)
            return
        work = product.work(self._world)
        if not work:
            return
        writes_mirror = product.plan is not None and bool(product.plan.written_fields)
        if writes_mirror and product.gpu is not None and not product.dispatch_refused:
            # A mirror writer still on the GPU whose readback was refused (or whose readback
            # slot went to a waiting reader): its fallback serves only what its kernel ran over
            # this frame (the mirror is written there); the rest stays owed to the kernel, whose
            # writes its readers wait for. (A dispatch refused frame after frame, a limit, is
            # served whole below: its readers wait, logged.)
            if product.policy is ReadbackPolicy.SELECTED_PATH and not set(work.keys) <= product.gpu_written:
                return
            ran = [k for k in work.keys if k in product.gpu_written]
            if not ran:
                return
            if len(ran) != len(work.keys):
                work = product.work(self._world, keys=set(ran))
                if not work:
                    return
        # Off the GPU, or refused frame after frame: its kernel writes nothing it serves here,
        # and its readers wait for those chunks (``mirror_unwritten``).
        unwritten_here = writes_mirror and (product.gpu is None or product.dispatch_refused)
        fresh = product.skip_computed(work)
        if len(fresh) != len(work.keys):
            if unwritten_here:
                # Served already (their results applied), but not written by its kernel here:
                # after recover_gpu() a new mirror holds the world's bytes for them, and its
                # readers must wait for its kernel (review helper 95), as for what it computes below.
                product.mirror_unwritten.update(k for k in set(work.keys).difference(fresh) if k not in product.gpu_written)
            if not fresh:
                return
            if product.policy is not ReadbackPolicy.SELECTED_PATH:  # a path is computed whole
                work = product.work(self._world, keys=set(fresh))
        world = self._world
        if not all(k in world for k in work.keys):
            # A chunk went while the work was listed (a change outside the engine thread, which
            # World.lock keeps out of frames; another world may let it in). The fallback is
            # asked about live chunks only: what is still owed is listed afresh next frame.
            return
        plan = product.plan
        job = ProductWork(
            policy=product.policy,
            keys=work.keys,
            tiles=work.tiles,
            fields=product.field_map,
            params={**self._engine_params, **dict(plan.slot_params if plan is not None else ()), **product.params},
            spec=product.spec_values,
            record_dtype=plan.record_dtype if plan is not None else None,
            record_shape=plan.record_shape if plan is not None else (),
        )
        product.fallback_calls += 1
        asked = (product.renewals, product.epoch, product.fallback_calls)
        try:
            answer = product.cpu_fallback(self._world, job)
        except Exception as exc:
            self._errors.append(exc)
            return
        st.cpu_fallbacks += 1
        if (product.renewals, product.epoch, product.fallback_calls) != asked or self._products.get(product.handle) is not product:  # type: ignore[arg-type]
            # Changed while it computed, from inside it (set_params, invalidate, a selection,
            # unregister, a nested frame() that served the work itself): the answer is for what
            # was. What is owed now is served by a later call (review helper 177: an answer of
            # the old params was applied and its chunks marked computed, for good).
            return
        values: Any = None
        overflow: dict[str, int] = {}
        made: ProductResult | None = None
        stale: list[int] = []
        # The answer is checked before its chunks count as served: a malformed one leaves them
        # owed, as a fallback that raises does (they were never computed again: helper 177).
        if plan is not None and plan.readback:
            try:
                values = fallback_outputs(plan, answer, job.items, product.key)
            except ProductError as exc:
                self._errors.append(exc)
                return
            overflow = fallback_overflow(plan, values, job.items, job.params)  # capped as the kernel's would be
        elif plan is None:
            values = answer if isinstance(answer, Mapping) else np.asarray(answer)
        if values is not None:
            try:
                made, _, stale = split_current(product, self._world, work, values, product.handle, 0, "cpu", st.frame)  # type: ignore[arg-type]
            except ProductError as exc:
                self._errors.append(exc)
                return
            except (ValueError, TypeError) as exc:  # a CPU-only product's records that are not one a work item
                self._errors.append(ProductError(f"the CPU fallback of {product.key!r} answered records that do not fit its work: {exc}"))
                return
        product.done(work)
        product.cpu_done.update(zip(work.keys, work.versions))
        if unwritten_here:
            # Its kernel did not run over them: the fallback writes no mirror, its readers wait.
            product.mirror_unwritten.update(k for k in work.keys if k not in product.gpu_written)
        product.cpu_plan = fallback_view(product.plan)
        if values is None:
            return  # NONE: nothing to apply
        if stale:  # changed while the fallback computed (another thread): computed again
            st.chunks_stale += len(stale)
            product.reowe(self._world, stale)
        if made is not None and product.policy is not ReadbackPolicy.NONE:
            if overflow:
                made = _overflowed(product, made, overflow, st)
            self._call_apply(product, made)


def _overflowed(product: Product, made: ProductResult, overflow: dict[str, int], st: FrameStats) -> ProductResult:
    """An append ran past its capacity: the values hold its first ``capacity`` records; the
    result says how many were attempted, and the frame counts it (logged once a product)."""
    st.append_overflows += len(overflow)
    if not product.warned_overflow:
        product.warned_overflow = True
        name, attempted = next(iter(overflow.items()))
        log.warning("product %r: append output %r ran past its capacity (%d attempted); results carry ProductResult.overflow", product.key, name, attempted)
    return dataclasses.replace(made, overflow=dict(overflow))
