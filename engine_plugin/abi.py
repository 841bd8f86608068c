"""``engine_plugin.abi``: the kernel ABI of a ``.computeShader`` in one place.

    from engine_plugin import abi
    schema  = abi.parse(bindings_yaml_text)
    program = abi.program(key="my_kernel", schema=schema, wgsl=body)
    variant = program.variant(specialize={"T": "vec3<f32>"})
    run     = variant.run(n=4, inputs={"src": src})
    values  = abi.read(run.outputs["dst"])

Data flows one way: YAML text -> Schema -> Lowered -> compiled pipeline -> Run -> readback.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import CompileError, LoweringError, SchemaError
from .lowering import Lowered, Schema, VariantSpec, enumerate_variants, parse, resolve_spec, variant_count
from .lowering import evaluate as _evaluate
from .lowering import is_extended as _is_extended
from .lowering import lower as _lower
from .runtime import Output, Program, Run, Table, Variant, batch, flush, read, table
from .runtime import compile_lowered as _compile_lowered
from .runtime import program as _program

__all__ = [
    "Lowered",
    "Output",
    "Program",
    "Run",
    "Schema",
    "Table",
    "Variant",
    "VariantSpec",
    "batch",
    "compile",
    "device",
    "enumerate_variants",
    "evaluate",
    "flush",
    "is_extended",
    "lower",
    "page_binding",
    "parse",
    "program",
    "read",
    "resolve_spec",
    "table",
    "variant_count",
]


def _schema_arg(schema: Any) -> Schema:
    """``schema`` when it is a parsed Schema: the YAML text itself (the seed's Lua API takes the
    table) failed later as a raw AttributeError (review helper 151)."""
    if not isinstance(schema, Schema):
        raise SchemaError(f"schema= takes a parsed schema, abi.parse(bindings_yaml_text), not {type(schema).__name__}")
    return schema


def _wgsl_arg(wgsl: Any) -> str:
    if not isinstance(wgsl, str):
        raise LoweringError(f"wgsl= takes the kernel body's text, not {type(wgsl).__name__}")
    return wgsl


def is_extended(schema: Schema) -> bool:
    """Whether ``schema`` uses any ABI extension (columns, count/capacity, live, append,
    specialize, when, bits, page/column, and this project's own: atomic buffers, domain_count,
    textures and samplers). A vec3 element is not one: its flat words are the seed's layout."""
    return _is_extended(_schema_arg(schema))


def lower(schema: Schema, wgsl: str, spec: Mapping[str, str] | VariantSpec | None = None, **kwargs: Any) -> Lowered:
    """Lower one variant (pure Python, no device): ``Lowered(source, bindings, params, host_slots, source_map)``."""
    return _lower(_schema_arg(schema), _wgsl_arg(wgsl), spec, **kwargs)


def evaluate(text: str, vars: Mapping[str, float] | None = None, lengths: Mapping[str, int] | None = None) -> int | float:
    """Evaluate a count expression (``n``, params, ``len(b)``, max/min/ceil/floor, + - * / ( ))."""
    return _evaluate(text, vars or {}, lengths or {})


def compile(key: str, lowered: Lowered, label: str | None = None, device: Any = None) -> str:
    """Compile a lowered variant once per device; answers its dispatch key.

    The dispatch key is the lowered variant's content fingerprint (``key`` only labels the GPU
    objects), so the same lowered source under two keys compiles once.
    """
    if not isinstance(lowered, Lowered):
        raise CompileError(f"abi.compile takes a lowered variant, abi.lower(schema, wgsl, spec), not {type(lowered).__name__}")
    return _compile_lowered(lowered, label=label or key, device=device).key


def device() -> Any:
    """The plugin's default wgpu ``GPUDevice`` (acquired on first use): make the buffers and
    textures you hand to runs on it. A buffer of another device (``wgpu.utils.
    get_default_device()``'s is another one) cannot be bound: a run refuses it.

    Raises:
        NoAdapterError: no usable adapter.
    """
    from .device.context import get_context

    return get_context().device


def program(key: str, schema: Schema, wgsl: str, **kwargs: Any) -> Program:
    """The program under ``key`` (the standing one when schema and source are the same).

    Keyword arguments: ``wgsl_path`` (the body's file, named in errors), ``device``, ``store``
    (a variant cache), ``modules`` (``{name: (path, text)}``: the shared modules the body's
    ``#import NAME`` lines may name; see README "Shared modules").
    """
    return _program(key, _schema_arg(schema), _wgsl_arg(wgsl), **kwargs)


def page_binding(lowered: Lowered, columns: Mapping[str, Any]) -> Any:
    """The page buffer each page binding takes and the col_base_*/col_len_* params."""
    from .substrate.binding import page_binding as _page_binding

    return _page_binding(lowered, columns)
