"""Compile a lowered variant once per device: shader module, explicit layout, compute pipeline.

The layout is built from the lowered binding plan, never ``layout="auto"`` (which drops
bindings the body happens not to use, and then the host's bind group no longer fits). WGSL
errors from wgpu are mapped through the source map to the user's own file and line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

import wgpu

from ..device.context import DeviceContext, get_context
from ..device.loss import DeviceFault, classify
from ..errors import CompileError, DeviceLostError, PluginError, Span, bug
from ..lowering.lower import depth_error
from ..lowering.lowered import Lowered
from ..lowering.portability import WEBGPU_DEFAULTS, kernel_demands
from .loss import LOST_HINT, mark_lost
from .naga_report import parse_naga_report
from .textures import VIEW_DIMENSION

log = logging.getLogger("engine_plugin")

__all__ = ["CompiledVariant", "compile_lowered", "compiled", "wgsl_error_span", "compile_count"]

_LOC_RE = re.compile(r"(?:┌─[^\n]*?|wgsl):(\d+):(\d+)")
_stats = {"compiles": 0}
_stats_lock = threading.Lock()


def compile_count() -> int:
    """How many shader modules this process has compiled (tests count recompiles with it)."""
    return _stats["compiles"]


@dataclass
class CompiledVariant:
    """GPU objects of one lowered variant on one device; ``key`` is its dispatch key."""

    key: str
    lowered: Lowered
    module: Any
    bind_group_layout: Any
    pipeline: Any
    ctx: DeviceContext


def _layout_entries(lowered: Lowered) -> list[dict]:
    entries = []
    for b in lowered.bindings:
        entry: dict[str, Any] = {"binding": b.binding, "visibility": wgpu.ShaderStage.COMPUTE}
        if b.role == "texture":
            dim, sample, filterable = b.texture
            kind = {"float": "float" if filterable else "unfilterable-float", "uint": "uint", "sint": "sint"}[sample]
            entry["texture"] = {"sample_type": kind, "view_dimension": VIEW_DIMENSION[dim], "multisampled": False}
        elif b.role == "sampler":
            entry["sampler"] = {"type": "filtering" if b.texture[0] == "linear" else "non-filtering"}
        elif b.role == "storage_texture":
            dim, fmt, access = b.texture
            entry["storage_texture"] = {
                "access": {"write": "write-only", "read": "read-only", "read_write": "read-write"}[access],
                "format": fmt,
                "view_dimension": VIEW_DIMENSION[dim],
            }
        elif b.buffer_type == "uniform":
            # One bind group serves every run: each run's params sit at a dynamic offset in a ring.
            entry["buffer"] = {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True}
        elif b.buffer_type == "storage":
            entry["buffer"] = {"type": wgpu.BufferBindingType.storage}
        else:
            entry["buffer"] = {"type": wgpu.BufferBindingType.read_only_storage}
        entries.append(entry)
    return entries


def wgsl_error_span(lowered: Lowered, message: str) -> tuple[Span | None, str]:
    """(user span, one-line reason) for a wgpu WGSL error message about ``lowered.source``:
    the innermost labelled span of naga's report, mapped through the source map."""
    report = parse_naga_report(message, lowered.source)
    if report.line is None:
        return None, report.message
    return lowered.source_map.locate(report.line, report.col), report.message


def _compile_error(lowered: Lowered, exc: Exception, stage: str, ctx: DeviceContext) -> PluginError:
    if classify(exc) == DeviceFault.LOST:  # not the user's mistake: never blame their .wgsl
        mark_lost(ctx)
        return DeviceLostError(f"{stage}: {LOST_HINT}")
    message = getattr(exc, "message", None) or str(exc)
    span, reason = wgsl_error_span(lowered, message)
    notes: tuple[str, ...] = ()
    if os.environ.get("ENGINE_PLUGIN_DUMP_WGSL"):
        notes = (f"lowered WGSL:\n{lowered.numbered_source()}",)
    if span is None:
        missing = _MISSING_OVERRIDE_RE.search(message)
        if missing is not None:
            return _missing_override(lowered, missing.group(1), notes)
        where = Span(lowered.source_map.files[1] if len(lowered.source_map.files) > 1 else lowered.asset)
        text = f"{stage} failed: {reason}"
        if _LOC_RE.search(message):
            text = f"{stage} failed in generated code: {reason}; set ENGINE_PLUGIN_DUMP_WGSL=1 to see it"
        return CompileError(text, where, notes=notes)
    return CompileError(reason + _read_only_hint(lowered, span, reason), span, notes=notes)


_MISSING_OVERRIDE_RE = re.compile(r"Missing value for pipeline-overridable constant with identifier string: '(\w+)'")


def _missing_override(lowered: Lowered, name: str, notes: tuple[str, ...]) -> CompileError:
    """An ``override`` without a default, at its declaration (wgpu names no place): a run sets
    no pipeline constants, so every one needs its value in the source (review helper 205)."""
    # By its name, or by its @id(N) (wgpu names an override with an id by the number).
    found = re.search(rf"\boverride\s+({re.escape(name)})\b", lowered.source)
    if found is None and name.isdigit():
        for by_id in re.finditer(r"@\s*id\s*\(\s*([0-9a-fA-FxX]+)[ui]?\s*\)\s*override\s+(\w+)", lowered.source):
            with contextlib.suppress(ValueError):
                if int(by_id.group(1), 0) == int(name):
                    found, name = by_id, by_id.group(2)
                    break
    declared = re.match(rf"{re.escape(name)}\s*:\s*(\w+)", lowered.source[found.start(found.lastindex or 1) :]) if found is not None else None
    example = f"`override {name}: {declared.group(1)} = {declared.group(1)}(0);`, say" if declared else "a default value"
    where = None
    if found is not None:
        at = found.start(found.lastindex or 1)  # the override's name
        line = lowered.source.count("\n", 0, at) + 1
        col = at - (lowered.source.rfind("\n", 0, at) + 1) + 1
        where = lowered.source_map.locate(line, col)
    where = where or Span(lowered.source_map.files[1] if len(lowered.source_map.files) > 1 else lowered.asset)
    return CompileError(
        f"override '{name}' has no default, and a run sets no pipeline constants: give it one ({example}), "
        f"or make it a compile-time choice (specialize: a kind: source or named option) or a param",
        where,
        notes=notes,
    )


_UNKNOWN_RE = re.compile(r"no definition in scope for identifier: `(\w+?)_(set|set_word|append|atomic_\w+)`")


def _read_only_hint(lowered: Lowered, span: Span, reason: str) -> str:
    """What to change when naga's complaint is about writing a binding declared ``access:
    read`` (a store into it, or a setter the lowering generates only for writable ones)."""
    read_only = {s.name for s in lowered.host_slots if s.access == "read"}
    name = None
    found = _UNKNOWN_RE.search(reason)
    if found is not None:
        name = found.group(1)
    elif "writing to this location is not permitted" in reason and span.text and span.col:
        written = re.match(r"[&*( ]*(\w+)", span.text[span.col - 1 :])
        name = written.group(1) if written else None
    if name not in read_only:
        return ""
    return f"; '{name}' is access: read in {lowered.source_map.files[0] if lowered.source_map.files else 'bindings.yaml'}: declare it access: read_write to write it"


COMPILED_KEPT = 256  # compiled variants a device keeps for sharing between programs (see _compile)


def compile_lowered(lowered: Lowered, label: str | None = None, device: Any = None, *, warn: bool = True) -> CompiledVariant:
    """Compile (or fetch) ``lowered`` on ``device``'s context; the same source compiles once.
    ``warn``: log its portability issues (a bake's workers do not: the bake reports them).

    Raises:
        CompileError: wgpu refused the shader or pipeline; the span names the user's file.
    """
    ctx = get_context(device)
    cache = ctx.cache("compiled")
    key = lowered.fingerprint
    found = cache.get(key)
    if found is not None:
        return found
    # One compile of a key at a time (a second caller waits for it and takes its result);
    # compiles of other keys go on meanwhile. The device's one lock was held across the compile:
    # a compile the driver never finishes (lavapipe on a huge var<private> array) held every
    # other compile behind it, and a game's poll() froze on one (review helper 141).
    while True:
        running: threading.Event | None = None
        try:
            with ctx.lock:
                found = cache.get(key)
                if found is not None:
                    return found
                compiling = ctx.cache("compiling")
                other: threading.Event | None = compiling.get(key)
                if other is not None and other.is_set():
                    other = None  # its compile ended without freeing the key (an interrupt): free
                if other is None:
                    running = threading.Event()
                    compiling[key] = running
            if other is not None:
                other.wait()
                continue  # compiled (in the cache now), or it failed: this caller meets its error itself
            return _compile(lowered, label, ctx, key, cache, warn)
        finally:
            # Whatever ends the compile (an error, Ctrl-C anywhere in here), its waiters go on
            # and the key is free (review helper 142: an interrupt here left it taken for good).
            if running is not None:
                try:
                    with ctx.lock:
                        if compiling.get(key) is running:
                            del compiling[key]
                finally:
                    running.set()


def _compile(lowered: Lowered, label: str | None, ctx: DeviceContext, key: str, cache: dict, warn: bool = True) -> CompiledVariant:
    """Compile ``lowered`` on ``ctx`` into ``cache`` under ``key`` (the caller holds the key)."""
    dev = ctx.device
    label = label or key[:12]
    if ctx.lost:
        raise DeviceLostError(LOST_HINT)
    too_deep = depth_error(_user_lines(lowered))
    if too_deep is not None:  # naga would take the process down with it
        tok, message = too_deep
        where = lowered.source_map.locate(tok.line, tok.col) or Span(lowered.source_map.files[0] if lowered.source_map.files else None)
        raise CompileError(message, where)
    try:
        module = dev.create_shader_module(code=lowered.source, label=label)
    except wgpu.GPUError as exc:
        raise _compile_error(lowered, exc, "shader compilation", ctx) from None
    with _stats_lock:
        _stats["compiles"] += 1
    # Past the device's own limits a kernel is refused at the user's line: a driver that does
    # not check ran 400,000 bytes of workgroup memory on a device allowing 32,768 (lavapipe:
    # review helper 203), undefined anywhere else.
    demands = kernel_demands(lowered)  # sized once: checked against the device here, and WebGPU's defaults below
    beyond = demands.beyond({name: int(ctx.limits.get(name, default)) for name, default in WEBGPU_DEFAULTS.items()}, "this device allows")
    if beyond:
        raise CompileError(beyond[0].message, beyond[0].span, notes=tuple(f"also: {issue.message}" for issue in beyond[1:]))
    try:
        bgl = dev.create_bind_group_layout(entries=_layout_entries(lowered), label=label)
        layout = dev.create_pipeline_layout(bind_group_layouts=[bgl], label=label)
        pipeline = dev.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": "main"}, label=label)
    except wgpu.GPUError as exc:
        raise _compile_error(lowered, exc, "pipeline creation", ctx) from None
    except Exception as exc:  # pragma: no cover - wgpu raising something else is our bug
        raise bug(f"pipeline creation raised {type(exc).__name__}: {exc}") from exc
    for issue in demands.portability() if warn else ():  # once per variant and device: it compiles here
        log.warning("%s", issue)
    compiled_variant = CompiledVariant(key, lowered, module, bgl, pipeline, ctx)
    with ctx.lock:
        cache[key] = compiled_variant
        # Bounded, oldest first: a live-edit session compiles every saved text once, and each
        # kept pipeline held ~0.35 MB for the device's life (review helper 148: 200 saves, 65 MB).
        # What runs holds its own CompiledVariant (a Variant keeps it); only sharing is lost.
        while len(cache) > COMPILED_KEPT:
            del cache[next(iter(cache))]
    return compiled_variant


def compiled(key: str, device: Any = None) -> CompiledVariant | None:
    """The compiled variant standing under a dispatch key on ``device``, if any."""
    return get_context(device).cache("compiled").get(key)


def _user_lines(lowered: Lowered) -> str:
    """The lowered source with only the lines that came from the user's body and modules (the
    rest blank, so line numbers hold): the expression bound's check reads these again, since a
    cached entry may have been lowered by a version without it; the generated lines are bounded
    by construction, and skipping them keeps the check to the size of the user's code."""
    entries = lowered.source_map.entries
    lines = lowered.source.split("\n")
    return "\n".join(line if k < len(entries) and entries[k][0] >= 1 else "" for k, line in enumerate(lines))
