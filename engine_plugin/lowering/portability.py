"""Portability: what a variant asks of a device beyond WebGPU's default limits.

lavapipe and desktop drivers run 1,024-invocation workgroups and 64 KiB of workgroup memory;
WebGPU only guarantees 256 invocations (256 x 256 x 64 a dimension), 16 KiB of workgroup
memory and 8 storage buffers a stage, so such a kernel works here and fails on a laptop, a
browser or a console. The lowering names each excess at the user's line; ``engine-plugin
lower`` prints them, ``--strict`` refuses the variant, and compiling logs them once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import Span
from .lowered import Lowered
from .param_types import ParamTypeError, parse_param_type, split_array_type
from .wgsl_text import tokens

__all__ = ["PortabilityIssue", "portability_issues", "WEBGPU_DEFAULTS"]

WEBGPU_DEFAULTS = {
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-size-y": 256,
    "max-compute-workgroup-size-z": 64,
    "max-compute-workgroup-storage-size": 16384,
    "max-storage-buffers-per-shader-stage": 8,
}
_CONST_RE = re.compile(r"\bconst\s+([A-Za-z_]\w*)\s*(?::\s*[a-z0-9]+\s*)?=\s*(\d+)[ui]?\s*;")


@dataclass(frozen=True)
class PortabilityIssue:
    span: Span
    message: str

    def __str__(self) -> str:
        caret = self.span.caret()
        return f"{self.span.prefix()}: warning: {self.message}" + (f"\n{caret}" if caret else "")


def _storage_size(type_text: str, consts: dict[str, int]) -> int | None:
    """Bytes of a workgroup variable's type (storage layout), or None when unknown (structs)."""
    t = " ".join(type_text.split())
    if t.startswith("atomic<"):
        return 4
    if t.startswith("array<") and t.endswith(">"):
        parts = split_array_type(t[len("array<") : -1])
        if parts is None:
            return None
        element, count_text = parts[0], parts[1].rstrip("ui")
        count = int(count_text) if count_text.isdigit() else consts.get(count_text)
        size = _storage_size(element, consts)
        if count is None or size is None:
            return None
        align = 16 if re.match(r"vec[34]|mat", element) else 8 if element.startswith("vec2") else 4
        return count * (-(-size // align) * align)
    try:
        p = parse_param_type(t)
    except ParamTypeError:
        return None
    return p.lanes * 4 if p.kind in ("scalar", "vector") else p.uniform_size


def portability_issues(lowered: Lowered) -> list[PortabilityIssue]:
    """Each way ``lowered`` exceeds WebGPU's default limits, at the user's line."""
    smap = lowered.source_map
    yaml_path, body_path = smap.files[0], smap.files[1] if len(smap.files) > 1 else smap.files[0]
    body = smap.texts[1] if len(smap.texts) > 1 else ""
    lines = body.split("\n")

    def at_body(line: int, col: int) -> Span:
        return Span(body_path, line, col, lines[line - 1] if 0 < line <= len(lines) else None)

    toks = list(tokens(body))
    wg_tok = next((t for i, t in enumerate(toks) if t.text == "workgroup_size" and i and toks[i - 1].text == "@"), None)
    wg_span = at_body(wg_tok.line, wg_tok.col) if wg_tok else Span(yaml_path)
    issues = []
    wx, wy, wz = lowered.workgroup
    d = WEBGPU_DEFAULTS
    if wx * wy * wz > d["max-compute-invocations-per-workgroup"]:
        issues.append(PortabilityIssue(wg_span, f"a workgroup of {wx * wy * wz} invocations; WebGPU guarantees {d['max-compute-invocations-per-workgroup']}"))
    for size, axis, limit in (
        (wx, "x", d["max-compute-workgroup-size-x"]),
        (wy, "y", d["max-compute-workgroup-size-y"]),
        (wz, "z", d["max-compute-workgroup-size-z"]),
    ):
        if size > limit:
            issues.append(PortabilityIssue(wg_span, f"workgroup size {size} in {axis}; WebGPU guarantees {limit}"))
    consts = {m.group(1): int(m.group(2)) for m in _CONST_RE.finditer(body)}
    total, first = 0, None
    for i, t in enumerate(toks):
        if t.text == "var" and [x.text for x in toks[i + 1 : i + 4]] == ["<", "workgroup", ">"] and i + 6 < len(toks):
            j = i + 6
            nest = 0
            while j < len(toks) and not (toks[j].text == ";" and nest == 0):
                nest += {"<": 1, ">": -1}.get(toks[j].text, 0)
                j += 1
            nbytes = _storage_size(body[toks[i + 6].offset : toks[j].offset if j < len(toks) else len(body)], consts)
            total += nbytes or 0
            first = first or t
    if total > d["max-compute-workgroup-storage-size"] and first is not None:
        issues.append(
            PortabilityIssue(at_body(first.line, first.col), f"{total} bytes of workgroup memory; WebGPU guarantees {d['max-compute-workgroup-storage-size']}")
        )
    storage = [b for b in lowered.bindings if b.buffer_type != "uniform"]
    if len(storage) > d["max-storage-buffers-per-shader-stage"]:
        extra = storage[d["max-storage-buffers-per-shader-stage"]]
        text = smap.texts[0].split("\n") if smap.texts else []
        issues.append(
            PortabilityIssue(
                Span(yaml_path, extra.line or None, None, text[extra.line - 1] if 0 < extra.line <= len(text) else None),
                f"{len(storage)} storage buffers (counters and tables included); WebGPU guarantees {d['max-storage-buffers-per-shader-stage']} a stage",
            )
        )
    return issues
