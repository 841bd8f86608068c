"""WGSL value types the ABI knows: scalars and vectors of them, with host layout facts."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ValueType", "parse_value_type", "is_value_type", "SCALARS", "KIND_CODE", "WGSL_KEYWORDS", "WGSL_RESERVED"]

SCALARS = ("f32", "i32", "u32")
# Kind codes used in column tables and host packing: 0 f32, 1 i32, 2 u32.
KIND_CODE = {"f32": 0, "i32": 1, "u32": 2}
NUMPY_DTYPE = {"f32": "<f4", "i32": "<i4", "u32": "<u4"}

_VEC_RE = re.compile(r"^vec([234])\s*<\s*(f32|i32|u32)\s*>$")
_VEC_SHORT_RE = re.compile(r"^vec([234])([fiu])$")
_SHORT = {"f": "f32", "i": "i32", "u": "u32"}


@dataclass(frozen=True)
class ValueType:
    """A scalar (``lanes == 1``) or a vector of 2-4 lanes of one scalar type."""

    scalar: str
    lanes: int

    @property
    def wgsl(self) -> str:
        return self.scalar if self.lanes == 1 else f"vec{self.lanes}<{self.scalar}>"

    @property
    def bytes(self) -> int:
        """Bytes an element occupies in storage (flat: a vec3 is 12 bytes)."""
        return 4 * self.lanes

    @property
    def numpy_dtype(self) -> str:
        return NUMPY_DTYPE[self.scalar]

    @property
    def uniform_align(self) -> int:
        """WGSL uniform/storage alignment of this type (vec3 aligns to 16)."""
        return {1: 4, 2: 8, 3: 16, 4: 16}[self.lanes]

    @property
    def uniform_size(self) -> int:
        return 4 * self.lanes

    def __str__(self) -> str:
        return self.wgsl


def parse_value_type(text: str) -> ValueType | None:
    """``'vec3<f32>'``, ``'vec3f'``, ``'u32'`` -> ValueType; anything else -> None."""
    if not isinstance(text, str):
        return None
    t = text.strip()
    if t in SCALARS:
        return ValueType(t, 1)
    m = _VEC_RE.match(t)
    if m:
        return ValueType(m.group(2), int(m.group(1)))
    m = _VEC_SHORT_RE.match(t)
    if m:
        return ValueType(_SHORT[m.group(2)], int(m.group(1)))
    return None


def is_value_type(text: str) -> bool:
    return parse_value_type(text) is not None


# Reserved and keyword identifiers a binding, param or option name must not take.
WGSL_KEYWORDS = frozenset(
    """alias break case const const_assert continue continuing default diagnostic discard else
    enable false fn for if let loop override requires return struct switch true var while
    array atomic bool f16 f32 i32 u32 mat2x2 mat2x3 mat2x4 mat3x2 mat3x3 mat3x4 mat4x2 mat4x3
    mat4x4 ptr sampler texture_1d texture_2d vec2 vec3 vec4 main params""".split()
    # WGSL's other predeclared types and their aliases (vec3f, mat2x2h): a struct named vec3f
    # parsed, and a binding of element vec3f then ran as vec3<f32>, the struct ignored (review
    # helper 215).
    + """sampler_comparison texture_2d_array texture_3d texture_cube texture_cube_array
    texture_multisampled_2d texture_depth_2d texture_depth_2d_array texture_depth_cube
    texture_depth_cube_array texture_depth_multisampled_2d texture_external texture_storage_1d
    texture_storage_2d texture_storage_2d_array texture_storage_3d""".split()
    + [f"vec{n}{s}" for n in (2, 3, 4) for s in "fhiu"]
    + [f"mat{c}x{r}{s}" for c in (2, 3, 4) for r in (2, 3, 4) for s in "fh"]
)
# WGSL's reserved words (the spec's list, which naga refuses too, but for binding_array, which
# this naga takes as a name): a binding named `meta` failed
# in the compiler, its error placed on another field of the binding's line (review helper 118).
WGSL_RESERVED = frozenset(
    """NULL Self abstract active alignas alignof as asm asm_fragment async attribute auto await
    become cast catch class co_await co_return co_yield coherent column_major common
    compile compile_fragment concept const_cast consteval constexpr constinit crate debugger
    decltype delete demote demote_to_helper do dynamic_cast enum explicit export extends extern
    external fallthrough filter final finally friend from fxgroup get goto groupshared highp impl
    implements import inline instanceof interface layout lowp macro macro_rules match mediump meta
    mod module move mut mutable namespace new nil noexcept noinline nointerpolation noperspective
    null nullptr of operator package packoffset partition pass patch pixelfragment precise
    precision premerge priv protected pub public readonly ref regardless register reinterpret_cast
    require resource restrict self set shared sizeof smooth snorm static static_assert static_cast
    std subroutine super target template this thread_local throw trait try type typedef typeid
    typename typeof union unless unorm unsafe unsized use using varying virtual volatile wgsl where
    with writeonly yield""".split()
    # and the address spaces and access modes the generated declarations spell
    # (`var<storage, read> NAME`): naga took a binding of those names for a recursive
    # declaration, its error on another field (review helper 120)
    + ["read", "read_write", "storage", "uniform"]
)
