"""One product's registration on a :class:`~engine_plugin.gpu.WgpuBackend`, run through the
ABI runtime's execution core.

A product owns one *results area*: a buffer its outputs are placed in, one after another at
the device's storage offset alignment, sized for its capacity (the most work items one
dispatch holds). Each dispatch is a run of the product's variant prepared by
:meth:`Variant.prepare <engine_plugin.runtime.variant.Variant.prepare>`: the same binding,
params packing, workgroup folding and clears as ``variant.run``, with the work list, the
field mirrors and the caller's inputs bound by name and the outputs zeroed in place in the
submission's order. The backend validates the dispatch (generation, pipeline, budgets) and
records it; one readback copy of the used part of the results area brings every output back.

Nothing here knows a generated name: the runtime and the lowering own them.

Buffers are released with the registration, never destroyed: submitted work may still use
them (destroying a buffer that in-flight work uses aborts the process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..device.flags import COPY_DST as _COPY_DST  # WebGPU usage flags as numbers: no wgpu import here
from ..device.flags import COPY_SRC as _COPY_SRC
from ..device.flags import STORAGE as _STORAGE
from ..errors import Span
from ..gpu.config import WgpuProductDesc
from ..gpu.descriptors import DispatchDesc, ReadbackPolicy
from ..gpu.handles import GpuProductHandle
from .contract import ProductError, ProductPlan

__all__ = ["GpuProduct"]


class GpuProduct:
    """The GPU side of one product: its results area, bound inputs, backend handle.

    Make it with :meth:`create` (None when the backend refuses or fails closed).
    """

    def __init__(self, backend: Any, variant: Any, plan: ProductPlan, capacity: int, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> None:
        self.backend = backend
        self.variant = variant
        self.plan = plan
        self.capacity = capacity  # work items one dispatch can hold
        self.params = dict(params)
        self.handle: GpuProductHandle | None = None
        self.results: Any = None
        self._inputs: dict[str, Any] = dict(inputs)
        self._lengths: dict[str, int] = {}  # field binding -> mirror elements (count expressions read them)
        self._results_bytes: dict[int, int] = {}  # items -> readback_bytes (asked every dispatch)
        self.pipeline: Any = None  # the pipeline registered with the backend

    @property
    def swapped(self) -> bool:
        """Whether a body-only reload swapped another pipeline into its variant since it was
        registered (the backend refuses its dispatches until it is registered again)."""
        return self.variant.compiled.pipeline is not self.pipeline

    @classmethod
    def create(
        cls,
        backend: Any,
        key: Any,
        variant: Any,
        plan: ProductPlan,
        capacity: int,
        params: Mapping[str, Any],
        callback: Callable,
        policy: ReadbackPolicy,
        inputs: Mapping[str, Any] | None = None,
    ) -> GpuProduct | None:
        """Make the resources and register them; None when refused (``backend.last_refusal``).

        Raises:
            PluginError: the product's outputs cannot be sized (a bad count expression).
        """
        made = cls(backend, variant, plan, capacity, params, inputs or {})
        for f in plan.fields:
            made._inputs[f.binding] = backend.field_buffer(f.field)
        made._lengths = {f.binding: int(made._inputs[f.binding].size) // f.element_bytes for f in plan.fields}
        for name, value in made._inputs.items():  # count expressions may read inputs= lengths too
            length = variant.length_of(name, value)
            if length is not None and name not in made._lengths:
                made._lengths[name] = length
        need = made.readback_bytes(capacity)  # raises a DispatchError naming the binding
        desc = backend.guarded(f"creating the resources of product {key!r}", lambda: made._resources(need, callback, policy))
        if desc is None:
            return None
        made.handle = backend.register_product(key, desc)
        return made if made.handle is not None else None

    def _resources(self, need: int, callback: Callable, policy: ReadbackPolicy) -> WgpuProductDesc:
        size = -(-max(16, need) // 4) * 4
        label = f"engine_plugin.product.{self.variant.program.key}.results"
        self.results = self.backend.device.create_buffer(size=size, usage=_STORAGE | _COPY_SRC | _COPY_DST, label=label)
        reads_back = policy is not ReadbackPolicy.NONE
        self.pipeline = self.variant.compiled.pipeline
        return WgpuProductDesc(
            pipeline=self.pipeline,
            readback_source=self.results if reads_back else None,
            callback=callback if reads_back else None,
            fields=self.plan.field_names,
        )

    def readback_bytes(self, n: int) -> int:
        """Bytes of the results area a dispatch over ``n`` items uses (what its readback
        copies at most: the engine's unit for the readback byte budget)."""
        found = self._results_bytes.get(n)
        if found is None:  # params and mirror lengths are fixed for the registration: n decides
            found = self._results_bytes[n] = int(self.variant.results_bytes(n, self.params, {**self._lengths, self.plan.items: n}))
            if len(self._results_bytes) > 256:
                self._results_bytes.clear()
        return found

    def dispatch_desc(self, items: np.ndarray, chunk_count: int) -> DispatchDesc:
        """The dispatch of one work list (u32 items), prepared by the runtime.

        Raises:
            DispatchError: the run does not check (e.g. its outputs outgrow the results area).
        """
        assert self.handle is not None, "a product dispatches only while registered"
        n = int(items.size)
        inputs = dict(self._inputs)
        inputs[self.plan.items] = items
        prepared = self.variant.prepare(n, inputs, self.params, n if self.plan.domain_count else None, results=self.results)
        for o in self.plan.outputs:
            if o.per_item and prepared.layout[o.name].capacity != o.per_item * n:
                prepared.submitted()  # never submitted: its buffers are free
                raise ProductError(
                    f"output {o.name!r} holds {prepared.layout[o.name].capacity} records for {n} work items, not {o.per_item} each as planned; "
                    "a count that is not k * n for every n is a whole-dispatch output",
                    Span(self.variant.yaml_path),
                )
        return DispatchDesc(self.handle, self.plan.fields[0].field, max(1, chunk_count), prepared.run.groups, prepared=prepared)

    def release(self) -> None:
        """Unregister (late readbacks of this generation are then stale) and drop the buffers."""
        if self.handle is not None:
            self.backend.unregister_product(self.handle)
        if self.results is not None:
            self.variant.forget_placed(self.results)
        self.results = None
        self._inputs = {}

    @property
    def live(self) -> bool:
        return self.handle is not None and self.backend.is_live(self.handle)
