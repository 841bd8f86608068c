"""One product's registration on a :class:`~engine_plugin.gpu.WgpuBackend`.

The engine makes the variant's resources and hands them to the backend as a
:class:`~engine_plugin.gpu.WgpuProductDesc`: the compiled pipeline, one bind group (field
mirrors, a work-list buffer, the output, the params uniform at dynamic offset 0), the output as
readback source. Each dispatch writes the work list and the params block through the
:class:`~engine_plugin.gpu.DispatchDesc` (the backend writes them only when it accepts the
dispatch), so everything the GPU sees goes through the backend's checks and fail-closed paths.

Buffers are released with the registration, never destroyed: submitted work may still use
them (destroying a buffer that in-flight work uses aborts the process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..gpu.config import WgpuProductDesc
from ..gpu.descriptors import DispatchDesc, ReadbackPolicy
from ..gpu.flags import COPY_DST as _COPY_DST  # WebGPU usage flags as numbers: no wgpu import here
from ..gpu.flags import COPY_SRC as _COPY_SRC
from ..gpu.flags import STORAGE as _STORAGE
from ..gpu.flags import UNIFORM as _UNIFORM
from ..gpu.handles import GpuProductHandle
from ..lowering.geometry import GEOMETRY_FIELDS, Domain, dispatch_fields
from ..runtime.params import ParamsPacker
from .contract import ProductPlan

__all__ = ["GpuProduct"]


class GpuProduct:
    """The GPU side of one product: buffers, bind group, backend handle, params packing.

    Make it with :meth:`create` (None when the backend refuses or fails closed).
    """

    def __init__(self, backend: Any, variant: Any, plan: ProductPlan, capacity: int) -> None:
        self.backend = backend
        self.variant = variant
        self.plan = plan
        self.capacity = capacity  # work items one dispatch can hold
        self.handle: GpuProductHandle | None = None
        self.items_buffer: Any = None
        self.params_buffer: Any = None
        self.output_buffer: Any = None
        self._base = np.zeros(0, np.uint32)
        self._offsets: dict[str, int] = {}
        self._limit = 65_535

    @classmethod
    def create(
        cls, backend: Any, key: Any, variant: Any, plan: ProductPlan, capacity: int, params: Mapping[str, Any], callback: Callable, policy: ReadbackPolicy
    ) -> GpuProduct | None:
        """Make the resources and register them; None when refused (``backend.last_refusal``)."""
        made = cls(backend, variant, plan, capacity)
        desc = backend.guarded(f"creating the resources of product {key!r}", lambda: made._resources(params, callback, policy))
        if desc is None:
            return None
        made.handle = backend.register_product(key, desc)
        return made if made.handle is not None else None

    def _resources(self, params: Mapping[str, Any], callback: Callable, policy: ReadbackPolicy) -> WgpuProductDesc:
        dev = self.backend.device
        lowered = self.variant.lowered
        plan = self.plan
        self._limit = max(1, self.backend.capabilities().max_workgroups_x)
        label = f"engine_plugin.product.{self.variant.program.key}"
        self.items_buffer = dev.create_buffer(size=max(16, 4 * self.capacity), usage=_STORAGE | _COPY_DST, label=f"{label}.{plan.items}")
        out_bytes = -(-max(16, plan.record_bytes * self.capacity) // 4) * 4
        self.output_buffer = dev.create_buffer(size=out_bytes, usage=_STORAGE | _COPY_SRC, label=f"{label}.{plan.output}")
        size = lowered.params.size
        self.params_buffer = dev.create_buffer(size=max(16, size), usage=_UNIFORM | _COPY_DST, label=f"{label}.params")
        fields = {f.index: f for f in plan.fields}
        entries = []
        fixed: dict[str, int] = {}
        for b in lowered.bindings:
            if b.binding == plan.params_index:
                resource = {"buffer": self.params_buffer, "offset": 0, "size": size}
            elif b.binding == plan.items_index:
                resource = {"buffer": self.items_buffer, "offset": 0, "size": self.items_buffer.size}
            elif b.binding == plan.output_index:
                resource = {"buffer": self.output_buffer, "offset": 0, "size": self.output_buffer.size}
            else:
                f = fields[b.binding]
                mirror = self.backend.field_buffer(f.field)
                resource = {"buffer": mirror, "offset": 0, "size": mirror.size}
                fixed[f"zero_len_{f.binding}"] = mirror.size // f.element_bytes
            entries.append({"binding": b.binding, "resource": resource})
        group = dev.create_bind_group(layout=self.variant.compiled.bind_group_layout, entries=entries, label=f"{label}.bind_group")
        # The params block is packed once; each dispatch only changes n, the strides and lengths.
        packer = ParamsPacker(lowered, self.variant.yaml_path, {})
        checked = packer.check(dict(params))
        self._base = np.frombuffer(bytes(packer.pack(checked, fixed)), dtype=np.uint32).copy()
        for name in ("n", *GEOMETRY_FIELDS, f"zero_len_{plan.items}", f"zero_len_{plan.output}"):
            f = lowered.params.field(name)
            if f is not None:
                self._offsets[name] = f.offset // 4
        reads_back = policy is not ReadbackPolicy.NONE
        return WgpuProductDesc(
            pipeline=self.variant.compiled.pipeline,
            bind_groups=[group],
            readback_source=self.output_buffer if reads_back else None,
            callback=callback if reads_back else None,
            fields=plan.field_names,
            dynamic_offsets=[[0]],
            writable=(self.items_buffer, self.params_buffer),
        )

    def geometry(self, n: int) -> tuple[dict[str, int], tuple[int, int, int]]:
        """The entry point's params and the workgroups for ``n`` items (the ABI runtime's fold)."""
        found = dispatch_fields(Domain((max(n, 1), 1, 1)), self.variant.lowered.workgroup, self._limit)
        assert found is not None, "a work list never needs more workgroups than a device launches"
        return found

    def groups(self, n: int) -> tuple[int, int, int]:
        return self.geometry(n)[1]

    def dispatch_desc(self, items: np.ndarray, chunk_count: int) -> DispatchDesc:
        """The dispatch of one work list (u32 items): writes the list and the params with it."""
        n = int(items.size)
        fields, (gx, gy, gz) = self.geometry(n)
        block = self._base.copy()
        o = self._offsets
        block[o["n"]] = n
        for name, value in fields.items():
            if name in o:
                block[o[name]] = value
        for name in (f"zero_len_{self.plan.items}", f"zero_len_{self.plan.output}"):
            if name in o:
                block[o[name]] = n
        assert self.handle is not None, "a product dispatches only while registered"
        return DispatchDesc(
            self.handle,
            self.plan.fields[0].field,
            max(1, chunk_count),
            (gx, gy, gz),  # type: ignore[arg-type]
            writes=((self.items_buffer, 0, items), (self.params_buffer, 0, block)),
        )

    def release(self) -> None:
        """Unregister (late readbacks of this generation are then stale) and drop the buffers."""
        if self.handle is not None:
            self.backend.unregister_product(self.handle)
        self.items_buffer = self.params_buffer = self.output_buffer = None

    @property
    def live(self) -> bool:
        return self.handle is not None and self.backend.is_live(self.handle)
