"""The pure-Python half of the ABI: bindings.yaml -> Schema -> lowered WGSL + plan. Never imports wgpu."""

from .expressions import Expr, evaluate, parse_expression
from .lower import LOWERING_VERSION, lower
from .lowered import ColumnSlot, HostSlot, Lowered, LoweredBinding, ParamField, ParamsLayout, SourceMap
from .parse import MAX_PAGES, parse
from .schema import Binding, Param, Schema, SpecParam
from .variants import VariantSpec, enumerate_variants, iter_variants, resolve_recorded, resolve_spec, variant_count

__all__ = [
    "Binding",
    "ColumnSlot",
    "Expr",
    "HostSlot",
    "LOWERING_VERSION",
    "Lowered",
    "LoweredBinding",
    "MAX_PAGES",
    "Param",
    "ParamField",
    "ParamsLayout",
    "Schema",
    "SourceMap",
    "SpecParam",
    "VariantSpec",
    "enumerate_variants",
    "iter_variants",
    "evaluate",
    "is_extended",
    "lower",
    "parse",
    "parse_expression",
    "resolve_recorded",
    "resolve_spec",
    "variant_count",
]


def is_extended(schema: Schema) -> bool:
    """Whether the schema uses any ABI extension (columns, count/capacity, live, append,
    specialize, when, bits, page/column, domain_count, atomic)."""
    if schema.specialize:
        return True
    for b in schema.bindings:
        if b.kind != "buffer":
            return True
        if b.count is not None or b.capacity is not None or b.live or b.append or b.when is not None or b.bits or b.atomic:
            return True
    return False
