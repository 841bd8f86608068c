"""Shared pieces of the lowering tests: the assets they lower and a real-device compile.

Paths handed to the lowering are repository-relative, so generated headers, source maps and
golden files never depend on where the checkout lives.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from engine_plugin.assets.folder import find_assets, read_asset_folder
from engine_plugin.lowering import Lowered, Schema, VariantSpec, enumerate_variants, lower, parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVERY_KIND = "tests/lowering/assets/every_kind.computeShader"
# The line of every_kind's body that only a float_order shader may have.
APPEND_LINE = "    _ = hits_append(v);\n"
# Calls determinism: exact refuses: append, exchange (the last writer wins), f32 add (sum order).
_ORDER_DEPENDENT = re.compile(r"hits_append\(|_atomic_exchange\(|\b(af|b_f32)_atomic_add\(")

# Table column names handed to every variant that has the table (unused names are harmless).
TABLE_COLUMNS = {
    "cols": ["weight"],
    "table": ["pos", "vel", "mass"],
    "out_table": ["heat", "cold"],
}

# Variants validated on the device in this process, by asset (the figure the issue asks for).
VALIDATED: dict[str, int] = {}


@dataclass(frozen=True)
class Asset:
    """An asset's two texts as the lowering sees them, under a short id for test names."""

    id: str
    yaml_path: str
    yaml_text: str
    wgsl_path: str
    wgsl_text: str
    modules: dict[str, tuple[str, str]] = field(default_factory=dict)  # what the body imports

    def __repr__(self) -> str:
        return f"Asset({self.id})"

    @property
    def schema(self) -> Schema:
        return parse(self.yaml_text, self.yaml_path)

    def columns_for(self, schema: Schema) -> dict[str, list[str]]:
        tables = {b.name for b in schema.bindings if b.kind == "columns"}
        return {k: v for k, v in TABLE_COLUMNS.items() if k in tables}

    def lower(self, spec: dict[str, str] | VariantSpec | None = None) -> Lowered:
        schema = self.schema
        return lower(schema, self.wgsl_text, spec, columns=self.columns_for(schema), wgsl_path=self.wgsl_path, modules=self.modules)

    def variants(self) -> list[VariantSpec]:
        return enumerate_variants(self.schema)


def _rel(path: str) -> str:
    return os.path.relpath(path, REPO).replace(os.sep, "/")


def read_asset(folder: str, id: str | None = None) -> Asset:
    """An asset folder given relative to the repository root."""
    src = read_asset_folder(os.path.join(REPO, folder), root=os.path.join(REPO, folder.split("/")[0]))  # modules up to assets/
    return Asset(
        id or os.path.basename(folder).removesuffix(".computeShader"),
        _rel(src.yaml_path),
        src.yaml_text,
        _rel(src.wgsl_path),
        src.wgsl_text,
        {m.name: (_rel(m.path), m.text) for m in src.modules},
    )


def sample_assets() -> list[Asset]:
    """Every .computeShader folder under assets/ (the shipped samples)."""
    return [read_asset(os.path.relpath(f, REPO)) for f in find_assets(os.path.join(REPO, "assets"))]


def every_kind_assets() -> list[Asset]:
    """The synthetic every-binding-kind asset, as float_order (with NAME_append) and as exact."""
    float_order = read_asset(EVERY_KIND, "every_kind-float_order")
    assert "determinism: float_order" in float_order.yaml_text and APPEND_LINE in float_order.wgsl_text
    exact = Asset(
        "every_kind-exact",
        float_order.yaml_path,
        float_order.yaml_text.replace("determinism: float_order", "determinism: exact"),
        float_order.wgsl_path,
        # Blank the float_order-only lines (the append, and the atomics whose words depend on
        # the order invocations reach them), keeping every other line where it was.
        "".join("\n" if _ORDER_DEPENDENT.search(line) else line for line in float_order.wgsl_text.splitlines(keepends=True)),
    )
    return [float_order, exact]


def sample(name: str) -> Asset:
    return read_asset(f"assets/samples/{name}.computeShader")


# -------------------------------------------------------------------------- the device side
# Where a wgpu (naga) message points in the lowered source: "┌─ wgsl:3:9" (or ":3:9").
WGPU_POSITION = re.compile(r"┌─ [^:\s]*:(\d+):(\d+)")
_DECL_RE = re.compile(r"^@group\((\d+)\) @binding\((\d+)\) var<([a-z_, ]+)> (\w+): (.+);$", re.M)


def declared_bindings(source: str) -> list[tuple[int, int, str, str, str]]:
    """(group, binding, address space, name, type) of each binding the lowered source declares."""
    return [(int(g), int(b), space, name, type_) for g, b, space, name, type_ in _DECL_RE.findall(source)]


def compile_lowered(device, lowered: Lowered):
    """Shader module + explicit bind group layout (from ``lowered.bindings``) + compute pipeline.

    Never ``layout="auto"``: the plan the host binds by must be the one the shader accepts.
    Raises wgpu.GPUValidationError when either wgpu step refuses.
    """
    import wgpu

    module = device.create_shader_module(code=lowered.source)
    entries = [
        {"binding": b.binding, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": b.buffer_type}}
        for b in lowered.bindings
    ]
    bgl = device.create_bind_group_layout(entries=entries)
    layout = device.create_pipeline_layout(bind_group_layouts=[bgl])
    return device.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": "main"})


def pack_params(lowered: Lowered, values: dict) -> bytes:
    """The params uniform packed by ``lowered.params`` offsets; fields not given are zero."""
    import struct

    from engine_plugin.lowering.types import parse_value_type

    blob = bytearray(lowered.params.size)
    for f in lowered.params.fields:
        if f.name not in values:
            continue
        vt = parse_value_type(f.type)
        lanes = values[f.name] if vt.lanes > 1 else [values[f.name]]
        fmt = {"u32": "<I", "i32": "<i", "f32": "<f"}[vt.scalar]
        for lane, v in enumerate(lanes):
            struct.pack_into(fmt, blob, f.offset + 4 * lane, v)
    return bytes(blob)


def run_once(device, lowered: Lowered, buffers: dict, params: dict, groups=(1, 1, 1)) -> dict:
    """Dispatch a lowered variant once: ``buffers[name]`` is a numpy array to upload or a word
    count to zero-fill; answers every storage binding read back as u32 words."""
    import numpy as np
    import wgpu

    pipeline = compile_lowered(device, lowered)
    usage = wgpu.BufferUsage
    # The generated entry point unfolds workgroups by the geometry params: unless a test sets
    # them, the domain is exactly the groups dispatched (no fold).
    wx, wy, wz = lowered.workgroup
    gx, gy, gz = groups
    geometry = {"zero_nx": gx * wx, "zero_ny": gy * wy, "zero_nz": gz * wz, "zero_gx": gx, "zero_gy": gy, "zero_gz": gz, "zero_px": gx, "zero_py": gy}
    params = {**geometry, **params}
    made, entries = {}, []
    for b in lowered.bindings:
        if b.buffer_type == "uniform":
            buf = device.create_buffer_with_data(data=pack_params(lowered, params), usage=usage.UNIFORM)
        else:
            given = buffers[b.name]
            data = np.zeros(int(given), "<u4") if isinstance(given, int) else np.ascontiguousarray(given)
            buf = device.create_buffer_with_data(data=data.tobytes(), usage=usage.STORAGE | usage.COPY_SRC)
            made[b.name] = buf
        entries.append({"binding": b.binding, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
    bind_group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
    encoder = device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, bind_group)
    cpass.dispatch_workgroups(*groups)
    cpass.end()
    device.queue.submit([encoder.finish()])
    return {name: np.frombuffer(device.queue.read_buffer(buf), dtype="<u4").copy() for name, buf in made.items()}
