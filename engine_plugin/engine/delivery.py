"""Steps 5 and 6 of the :class:`~engine_plugin.engine.Engine` frame: completed readbacks are
revalidated against the world and applied or discarded (counted); CPU fallbacks compute
what the GPU could not serve.

A mixin of ``Engine`` (it uses the engine's ``world``, ``backend`` and products); split from
``engine.py`` to keep each module about one thing.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..gpu.backend import ReadbackResult
from ..gpu.descriptors import ReadbackPolicy
from .contract import ProductError, ProductResult, ProductWork
from .products import InFlight, Product, split_current
from .records import decode_outputs, fallback_outputs
from .stats import FrameStats

__all__ = ["Delivery"]

log = logging.getLogger("engine_plugin.engine")


class Delivery:
    """Readback delivery, revalidation, ``apply`` calls and CPU fallbacks."""

    world: Any
    backend: Any
    config: Any
    _products: Any
    _changed_at: dict[str, np.ndarray]
    _completed: list
    _errors: list[BaseException]
    _engine_params: dict[str, Any]

    def _on_readback(self, result: ReadbackResult) -> None:
        """The backend's callback (inside ``backend.poll``): keep a copy, decide later."""
        if result.ok:
            inflight: InFlight = result.desc.user
            # The plan of the request, not the product's now: a reload may have changed it.
            items = int(inflight.work.items.size)
            self._completed.append((result, decode_outputs(inflight.plan, inflight.layout, result.data, items)))  # type: ignore[arg-type]
        else:
            self._completed.append((result, None))

    def _collect(self, st: FrameStats) -> None:
        """Step 5: deliver finished readbacks; apply what is still current."""
        try:
            self.backend.poll()
        except Exception as exc:  # our callback only copies; anything else is the backend's
            self._errors.append(exc)
        completed, self._completed = self._completed, []
        for result, records in completed:
            self._deliver(result, records, st)

    def _deliver(self, result: ReadbackResult, records: np.ndarray | None, st: FrameStats) -> None:
        inflight: InFlight = result.desc.user
        product, work = inflight.product, inflight.work
        product.inflight = max(0, product.inflight - 1)
        live = (
            self._products.get(product.handle) is product
            and product.gpu is not None  # type: ignore[arg-type]
            and product.gpu.handle == inflight.gpu_handle
            and self.backend.is_live(inflight.gpu_handle)
        )
        if records is None:
            st.readbacks_failed += 1
            if self._products.get(product.handle) is product:  # type: ignore[arg-type]
                product.reowe(self.world, work.keys, failed=work)
            return
        if not live:
            st.readbacks_stale += 1
            st.chunks_stale += len(work.keys)
            return
        made, applied, stale = split_current(
            product,
            self.world,
            work,
            records,
            product.handle,  # type: ignore[arg-type]
            inflight.gpu_handle.generation,
            "gpu",
            inflight.frame,
            self._revalidator(product),
        )
        st.chunks_stale += len(stale)
        # A whole-dispatch output discarded for one changed chunk discards the others' results
        # too: they are owed again (a path's work always covers the whole path anyway).
        whole = made is None and product.policy is not ReadbackPolicy.SELECTED_PATH and len(stale) == len(work.keys)
        product.reowe(self.world, stale, failed=work if whole else None)  # recomputed from their new content (once)
        if made is None:
            st.readbacks_stale += 1
            return
        st.readbacks_applied += 1
        st.chunks_applied += len(applied)
        self._call_apply(product, made)

    def _revalidator(self, product: Product) -> Any:
        """``is_current(key, version)`` for ``product``'s results: the chunk's content version
        (``revalidate="chunk"``, SPEC section 4), or, with ``revalidate="fields"``, that none of
        the fields the product reads changed since ``version`` (other fields may have)."""
        if self.config.revalidate != "fields":
            return None
        world, changed = self.world, self._changed_at
        names = product.field_names

        def fields_current(key: int, version: int) -> bool:
            if key not in world:
                return False
            slot = world.slot(key)
            return all(not world.is_dirty(key, f) and changed[f][slot] <= version for f in names)

        return fields_current

    def _note_changes(self, name: str, keys: list[int], index: Any) -> None:
        """Remember when field ``name`` of ``keys`` last changed (``revalidate="fields"``)."""
        at = self._changed_at.get(name)
        if at is None:
            at = self._changed_at[name] = np.zeros(self.world.max_chunks, dtype=np.int64)
        meta = index.get if index is not None else (lambda k: (self.world.slot(k), self.world.version(k)))
        for k in keys:
            m = meta(k)
            if m is not None:
                at[m[0]] = m[1]

    def _call_apply(self, product: Product, result: ProductResult) -> None:
        if product.apply is None:
            return
        try:
            product.apply(result)
        except Exception as exc:
            self._errors.append(exc)

    def _fallback(self, product: Product, st: FrameStats) -> None:
        """Step 6: compute the owed work on the CPU and apply it (current by construction)."""
        product.force_cpu = False
        if product.cpu_fallback is None:
            if not product.warned_no_fallback:
                product.warned_no_fallback = True
                log.warning("product %r has no CPU fallback: its results wait for the GPU", product.key)
            return
        work = product.work(self.world)
        if not work:
            return
        plan = product.plan
        job = ProductWork(
            policy=product.policy,
            keys=work.keys,
            tiles=work.tiles,
            fields=product.field_map,
            params={**self._engine_params, **product.params},
            spec=product.spec_values,
            record_dtype=plan.record_dtype if plan is not None else None,
            record_shape=plan.record_shape if plan is not None else (),
        )
        try:
            answer = product.cpu_fallback(self.world, job)
        except Exception as exc:
            self._errors.append(exc)
            return
        st.cpu_fallbacks += 1
        product.done(work)
        values: Any
        if plan is not None and plan.readback:
            try:
                values = fallback_outputs(plan, answer, job.items, product.key)
            except ProductError as exc:
                self._errors.append(exc)
                return
        elif plan is not None:
            return  # NONE: nothing to apply
        else:
            values = np.asarray(answer)
        made, _, _ = split_current(product, self.world, work, values, product.handle, 0, "cpu", st.frame)  # type: ignore[arg-type]
        if made is not None and product.policy is not ReadbackPolicy.NONE:
            self._call_apply(product, made)
