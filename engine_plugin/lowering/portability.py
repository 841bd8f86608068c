"""Portability: what a variant asks of a device beyond WebGPU's default limits.

lavapipe and desktop drivers run 1,024-invocation workgroups and 64 KiB of workgroup memory;
WebGPU only guarantees 256 invocations (256 x 256 x 64 a dimension), 16 KiB of workgroup
memory and 8 storage buffers a stage, so such a kernel works here and fails on a laptop, a
browser or a console. The lowering names each excess at the user's line; ``engine-plugin
lower`` prints them, ``--strict`` refuses the variant, and compiling logs them once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import Span
from .lowered import Lowered
from .wgsl_text import evaluate_int, module_constants, tokens, vector_member
from .workgroup_init import TypeDeclarations, split_template, workgroup_declarations

__all__ = ["KernelDemands", "PortabilityIssue", "kernel_demands", "portability_issues", "WEBGPU_DEFAULTS"]

WEBGPU_DEFAULTS = {
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-size-y": 256,
    "max-compute-workgroup-size-z": 64,
    "max-compute-workgroup-storage-size": 16384,
    "max-storage-buffers-per-shader-stage": 8,
    "max-storage-textures-per-shader-stage": 4,
    "max-sampled-textures-per-shader-stage": 16,
    "max-samplers-per-shader-stage": 16,
}
_NOT_BUFFERS = ("texture", "storage_texture", "sampler")


@dataclass(frozen=True)
class PortabilityIssue:
    span: Span
    message: str

    def headline(self, kind: str = "warning") -> str:
        """One line: ``path:line:col: kind: message`` (``kind`` "": no label)."""
        return f"{self.span.prefix()}: {kind + ': ' if kind else ''}{self.message}"

    def __str__(self) -> str:
        caret = self.span.caret()
        return self.headline() + (f"\n{caret}" if caret else "")


_SCALARS = {"f32": 4, "i32": 4, "u32": 4, "f16": 2, "bool": 4}  # WGSL's SizeOf = AlignOf (bool: 4, as WebGPU counts it)
_SUFFIX = {"f": "f32", "i": "i32", "u": "u32", "h": "f16"}  # vec4f, mat3x3h, ...
_SHORT = re.compile(r"^(vec[234]|mat[234]x[234])([fiuh])$")
_TEMPLATE_SPACE = re.compile(r"\s*([<>,])\s*")


def _round(n: int, k: int) -> int:
    return -(-n // k) * k


class _Layout:
    """(align, size) of WGSL types as WGSL lays out memory (the spec's "Alignment and Size"
    table), seeing through the module's aliases, structs and integer constants; None for a
    type it cannot size (a runtime-sized array, an override-sized one, a texture)."""

    def __init__(self, text: str, toks: list) -> None:
        self.types = TypeDeclarations(toks, text)
        self._inits = module_constants(toks)
        self._consts: dict[str, int | None] = {}

    def const(self, name: str) -> int | None:
        """An integer constant's value; ``V.x``: a lane of a vector constant."""
        if name not in self._consts:
            self._consts[name] = None  # a cycle is unknown (and naga's to refuse)
            base, _, lane = name.partition(".")
            init = self._inits.get(base)
            if not init:
                value = None
            elif lane:
                value = vector_member(init, lane, self.const)
            else:
                value = evaluate_int(init, self.const)
            self._consts[name] = value
        return self._consts[name]

    def of(self, type_text: str, depth: int = 0) -> tuple[int, int] | None:
        t = _TEMPLATE_SPACE.sub(r"\1", self.types.resolve(type_text))  # "array <f32, N>" is "array<f32,N>"
        t = self.types.resolve(t)
        if depth > 32:
            return None
        short = _SHORT.match(t)
        if short:
            t = f"{short.group(1)}<{_SUFFIX[short.group(2)]}>"
        if t in _SCALARS:
            return _SCALARS[t], _SCALARS[t]
        if t.startswith("atomic<"):
            return 4, 4
        head, _, rest = t.partition("<")
        if not rest.endswith(">"):
            return self._struct(t, depth)
        args = split_template(rest[:-1])
        if head.startswith("vec") and len(args) == 1:
            scalar = self.of(args[0], depth + 1)
            if scalar is None:
                return None
            n = int(head[3:])
            return (2 if n == 2 else 4) * scalar[1], n * scalar[1]
        if head.startswith("mat") and len(args) == 1:
            cols, rows = int(head[3]), int(head[5])
            column = self.of(f"vec{rows}<{args[0]}>", depth + 1)
            return None if column is None else (column[0], cols * _round(column[1], column[0]))
        if head == "array" and len(args) == 2:
            element = self.of(args[0], depth + 1)
            count = evaluate_int(list(tokens(args[1])), self.const)
            if element is None or count is None or count < 0:
                return None
            return element[0], count * _round(element[1], element[0])
        return None

    def _struct(self, name: str, depth: int) -> tuple[int, int] | None:
        members = self.types.structs.get(name)
        if not members:
            return None
        offset, align = 0, 1
        attrs = self.types.member_attrs.get(name, [])
        for k, (_, member) in enumerate(members):
            m = self.of(member, depth + 1)
            if m is None:
                return None
            # @align(n) and @size(n) (WGSL: a member's alignment and size, at least its type's)
            found = attrs[k] if k < len(attrs) else {}
            m_align = evaluate_int(found["align"], self.const) if "align" in found else m[0]
            m_size = evaluate_int(found["size"], self.const) if "size" in found else m[1]
            if m_align is None or m_size is None:
                return None
            offset = _round(offset, m_align) + m_size
            align = max(align, m_align)
        return align, _round(offset, align)


def _workgroup_memory(lowered: Lowered) -> tuple[int, Span] | None:
    """(bytes of workgroup memory, the user's span of its largest variable) of the lowered
    module, or None without workgroup variables.

    Read from the lowered module, not the body: that is what compiles (``// @when`` blocks
    applied, ``#import``ed modules, specialised aliases and constants, a ``kind: workgroup``
    size). Each variable counts its WGSL size rounded up to 16 bytes, as WebGPU counts it
    against ``maxComputeWorkgroupStorageSize``; one it cannot size counts nothing (review
    helper 193: a struct array, an alias, a module's variable and a constant expression
    counted 0, and a variable of a ``@when`` block not compiled counted)."""
    text = lowered.source
    toks = list(tokens(text))
    found = workgroup_declarations(text, toks)
    if not found:
        return None
    layout = _Layout(text, toks)
    total, largest, at = 0, -1, found[0][0]
    for tok, type_text in found:
        size = layout.of(type_text)
        if size is None:
            continue
        total += _round(size[1], 16)
        if size[1] > largest:
            largest, at = size[1], tok
    smap = lowered.source_map
    span = smap.locate(at.line, at.col) or Span(smap.files[1] if len(smap.files) > 1 else smap.files[0])
    return total, span


def portability_issues(lowered: Lowered) -> list[PortabilityIssue]:
    """Each way ``lowered`` exceeds WebGPU's default limits, at the user's line."""
    return kernel_demands(lowered).portability()


class _Demand(NamedTuple):
    limit: str  # a WEBGPU_DEFAULTS key
    amount: int
    what: str  # the message before "; {says} {limit}"
    spans: tuple[Span, ...]  # one, or each counted binding's (the first past a limit is named)
    suffix: str = ""


@dataclass(frozen=True)
class KernelDemands:
    """What a lowered variant asks of a device, sized once (tokenizing the module for its
    workgroup memory is the costly part): compiling checks it against the device's own limits
    and warns against WebGPU's (:meth:`beyond`, twice, on the same sizes)."""

    demands: tuple[_Demand, ...]

    def beyond(self, limits: Mapping[str, int], says: str) -> list[PortabilityIssue]:
        """Each demand past ``limits`` (:data:`WEBGPU_DEFAULTS`' keys), at the user's line; each
        message ends ``; {says} {limit}``."""
        issues = []
        for d in self.demands:
            limit = limits[d.limit]
            if d.amount > limit:
                span = d.spans[limit] if len(d.spans) > 1 else d.spans[0]
                issues.append(PortabilityIssue(span, f"{d.what}; {says} {limit}{d.suffix}"))
        return issues

    def portability(self) -> list[PortabilityIssue]:
        """Each demand past WebGPU's default limits (:func:`portability_issues`)."""
        return self.beyond(WEBGPU_DEFAULTS, "WebGPU guarantees")


def kernel_demands(lowered: Lowered) -> KernelDemands:
    """The workgroup, workgroup memory and bindings of each kind ``lowered`` asks for."""
    smap = lowered.source_map
    yaml_path, body_path = smap.files[0], smap.files[1] if len(smap.files) > 1 else smap.files[0]
    body = smap.texts[1] if len(smap.texts) > 1 else ""
    lines = body.split("\n")

    def at_body(line: int, col: int) -> Span:
        return Span(body_path, line, col, lines[line - 1] if 0 < line <= len(lines) else None)

    toks = list(tokens(body))
    wg_tok = next((t for i, t in enumerate(toks) if t.text == "workgroup_size" and i and toks[i - 1].text == "@"), None)
    wg_span = at_body(wg_tok.line, wg_tok.col) if wg_tok else Span(yaml_path)
    wx, wy, wz = lowered.workgroup
    demands = [
        _Demand("max-compute-invocations-per-workgroup", wx * wy * wz, f"a workgroup of {wx * wy * wz} invocations", (wg_span,)),
        *(
            _Demand(f"max-compute-workgroup-size-{axis}", size, f"workgroup size {size} in {axis}", (wg_span,))
            for size, axis in ((wx, "x"), (wy, "y"), (wz, "z"))
        ),
    ]
    memory = _workgroup_memory(lowered)
    if memory is not None:
        total, largest = memory
        demands.append(_Demand("max-compute-workgroup-storage-size", total, f"{total} bytes of workgroup memory", (largest,)))
    # Each kind of binding against its own limit (review helper 208: textures and samplers
    # counted as storage buffers).
    text = smap.texts[0].split("\n") if smap.texts else []
    for key, what, members in (
        (
            "max-storage-buffers-per-shader-stage",
            "storage buffers (counters and tables included)",
            [b for b in lowered.bindings if b.role not in _NOT_BUFFERS and b.buffer_type != "uniform"],
        ),
        ("max-storage-textures-per-shader-stage", "storage textures", [b for b in lowered.bindings if b.role == "storage_texture"]),
        ("max-sampled-textures-per-shader-stage", "sampled textures", [b for b in lowered.bindings if b.role == "texture"]),
        ("max-samplers-per-shader-stage", "samplers", [b for b in lowered.bindings if b.role == "sampler"]),
    ):
        if members:
            spans = tuple(Span(yaml_path, b.line or None, None, text[b.line - 1] if 0 < b.line <= len(text) else None) for b in members)
            demands.append(_Demand(key, len(members), f"{len(members)} {what}", spans, " a stage"))
    return KernelDemands(tuple(demands))
