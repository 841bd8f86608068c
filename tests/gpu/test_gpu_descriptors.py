"""Descriptors, formats, handles, the protocol and NoGpuBackend: no device involved.

Descriptor ordering is checked with a recording backend, as in the reference's mock-backend
test: what a frame hands a backend is deterministic (field declaration order, then slot order,
adjacent slots coalesced) and carries the offsets the dense mirror layout implies.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import engine_plugin.gpu as gpu
from engine_plugin.errors import PluginError, StaleSpanError
from engine_plugin.gpu import (
    DispatchDesc,
    FieldMirrorDesc,
    GpuBackend,
    GpuCapabilities,
    GpuDescriptorError,
    GpuFieldFormat,
    GpuProductHandle,
    NoGpuBackend,
    ReadbackDesc,
    ReadbackPolicy,
    UnsupportedFieldTypeError,
    WgpuBackend,
    WgpuBackendConfig,
    coalesce_uploads,
    field_mirror_desc,
    upload_desc,
)
from engine_plugin.gpu.handles import SlotTable
from engine_plugin.world import World

# ---- formats ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, fmt, nbytes",
    [
        (np.uint8, "U8", 1),
        (np.uint16, "U16", 2),
        (np.uint32, "U32", 4),
        (np.uint64, "U64", 8),
        (np.int8, "I8", 1),
        (np.int16, "I16", 2),
        (np.int32, "I32", 4),
        (np.int64, "I64", 8),
        (np.float32, "F32", 4),
        (bool, "U8", 1),
        ("<f4", "F32", 4),
    ],
)
def test_field_formats_come_from_numpy_dtypes(dtype, fmt, nbytes):
    found = GpuFieldFormat.from_dtype(dtype)
    assert found.name == fmt and found.value_bytes == nbytes
    assert GpuFieldFormat(dtype) is found  # SPEC: "GpuFieldFormat (from a numpy dtype ...)": a raw ValueError before (review helper 194)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.complex64, object, "U4", ">u4", np.dtype([("a", "<f4")]), "not a dtype"])
def test_unsupported_field_types_are_type_errors_naming_what_is_accepted(dtype):
    with pytest.raises(TypeError, match="float32") as info:
        GpuFieldFormat.from_dtype(dtype)
    assert isinstance(info.value, (PluginError, UnsupportedFieldTypeError))
    with pytest.raises(UnsupportedFieldTypeError, match="float32"):
        GpuFieldFormat(dtype)


# ---- mirrors and spans ------------------------------------------------------------------


def make_world() -> World:
    w = World((4, 4), {"h": np.float32, "solid": bool}, max_chunks=8)
    for k in (5, 6, 7, 8):
        w.add(k)
    return w


def test_field_mirror_desc_describes_a_dense_chunk_slot_major_mirror():
    d = field_mirror_desc(make_world(), "solid")
    assert (d.field_index, d.format, d.value_bytes, d.tiles_per_chunk, d.bytes_per_chunk, d.chunk_count) == (1, GpuFieldFormat.U8, 1, 16, 16, 8)
    assert d.total_bytes() == 128 and d.chunk_offset(3) == 48


def test_overflowing_or_inconsistent_mirror_shapes_are_refused():
    with pytest.raises(GpuDescriptorError, match="more than any buffer"):
        FieldMirrorDesc("h", 0, GpuFieldFormat.U64, 8, 2**40, 2**43, 2**21)
    with pytest.raises(GpuDescriptorError, match="bytes_per_chunk"):
        FieldMirrorDesc("h", 0, GpuFieldFormat.F32, 4, 16, 60, 8)
    with pytest.raises(GpuDescriptorError, match="take 4 bytes"):
        FieldMirrorDesc("h", 0, GpuFieldFormat.F32, 2, 16, 32, 8)
    with pytest.raises(GpuDescriptorError, match="positive"):
        FieldMirrorDesc("h", 0, GpuFieldFormat.F32, 4, 16, 64, 0)


def test_upload_desc_spans_one_chunk_at_its_slot_offset():
    w = make_world()
    w.evict(6)
    d = upload_desc(w, "h", 7)
    assert (d.chunk_key, d.first_slot, d.dst_offset, d.nbytes) == (7, 2, 128, 64)
    assert d.data().shape == (1, 4, 4) and not d.data().flags.writeable


def test_coalesced_uploads_cover_runs_of_adjacent_slots_in_slot_order():
    w = make_world()
    w.evict(6)
    descs = coalesce_uploads(w, "h", [8, 5, 7])
    assert [(d.chunk_keys, d.first_slot, d.dst_offset, d.nbytes) for d in descs] == [((5,), 0, 0, 64), ((7, 8), 2, 128, 128)]
    assert descs[1].data().shape == (2, 4, 4)


def _edit(w: World) -> None:
    with w.edit(7) as f:
        f["h"][0, 0] = 3.0


MUTATIONS = {
    "write": lambda w: w.write(7, "h", 1.0),
    "set_tile": lambda w: w.set_tile(7, "solid", (0, 0), True),
    "edit": _edit,
    "evict": lambda w: w.evict(7),
    "evict_then_add_again": lambda w: (w.evict(7), w.add(7)),
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_an_upload_span_goes_stale_when_its_chunk_is_mutated_or_evicted(mutate):
    w = make_world()
    d = upload_desc(w, "h", 7)
    run = coalesce_uploads(w, "h", [7, 8])[0]
    mutate(w)
    assert not d.is_current() and not run.is_current()
    with pytest.raises(StaleSpanError, match="chunk 7"):
        d.data()
    with pytest.raises(StaleSpanError):
        run.data()


def test_an_upload_span_of_another_chunk_stays_valid():
    w = make_world()
    d = upload_desc(w, "h", 5)
    w.write(7, "h", 2.0)
    w.evict(8)
    assert d.is_current() and d.data().shape == (1, 4, 4)


def test_dispatch_desc_normalises_workgroups_to_three_dimensions():
    h = GpuProductHandle("p", 1)
    assert DispatchDesc(h, "h", 1, 7).workgroups == (7, 1, 1)
    assert DispatchDesc(h, "h", 1, (2, 3)).workgroups == (2, 3, 1)
    with pytest.raises(GpuDescriptorError):
        DispatchDesc(h, "h", 1, (1, 2, 3, 4))


# ---- capabilities, protocol, NoGpuBackend, config ----------------------------------------


def test_default_capabilities_mean_never_choose_the_gpu():
    assert not GpuCapabilities().usable
    assert GpuCapabilities(compute=True, max_buffer_bytes=1, max_workgroups_x=1).usable


def test_no_gpu_backend_refuses_everything_and_satisfies_the_protocol():
    w = make_world()
    be = NoGpuBackend()
    h = GpuProductHandle("p", 1)
    assert isinstance(be, GpuBackend)
    assert not be.capabilities().usable
    assert not be.register_field(field_mirror_desc(w, "h"))
    assert be.register_product("p", object()) is None and not be.is_live(h)
    assert not be.upload(upload_desc(w, "h", 5))
    assert not be.dispatch(DispatchDesc(h, "h", 1))
    assert not be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY))
    assert be.poll() == 0 and be.notify_device_error("x") is None and be.close() is None


def test_wgpu_backend_satisfies_the_protocol():
    assert all(
        callable(getattr(WgpuBackend, name))
        for name in (
            "capabilities",
            "register_field",
            "register_product",
            "unregister_product",
            "is_live",
            "upload",
            "dispatch",
            "readback",
            "poll",
            "notify_device_error",
            "close",
        )
    )


@pytest.mark.parametrize("bad", [dict(max_products=0), dict(max_workgroups_x=-1), dict(enabled="yes"), dict(stall_probe_s=0), dict(max_inflight_readbacks=1.5)])
def test_backend_config_refuses_values_that_could_never_work(bad):
    with pytest.raises(GpuDescriptorError):
        WgpuBackendConfig(**bad)


def test_backend_config_defaults_follow_webgpu_and_keep_full_field_off():
    c = WgpuBackendConfig()
    assert c.max_workgroups_x == 65_535 and not c.allow_full_field and c.enabled


def test_slot_table_reuses_the_lowest_free_slot_with_a_new_generation():
    t: SlotTable[str] = SlotTable(2)
    a, b = t.insert("a", "A"), t.insert("b", "B")
    assert t.insert("c", "C") is None
    t.remove(a)
    c = t.insert("c", "C")
    assert t.slot_of(c) == 0 and c.generation > b.generation > a.generation
    assert t.get(a) is None and t.get(c) == "C" and t.remove(a) is None


# ---- descriptor ordering through a recording backend -------------------------------------


class RecordingBackend(NoGpuBackend):
    """Accepts everything and records what it is handed, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def register_field(self, desc):
        self.calls.append(("field", desc.tag, desc.total_bytes()))
        return True

    def upload(self, desc):
        desc.data()  # a real backend would: stale spans must raise
        self.calls.append(("upload", desc.tag, desc.dst_offset, desc.nbytes, desc.chunk_keys))
        return True

    def dispatch(self, desc):
        self.calls.append(("dispatch", desc.product.key, desc.field, desc.chunk_count))
        return True

    def readback(self, desc):
        self.calls.append(("readback", desc.product.key, desc.policy, desc.chunk_keys, desc.versions))
        return True


def frame(world: World, backend: GpuBackend, handle: GpuProductHandle) -> None:
    """The order the engine follows: dirty uploads per field, then dispatch, then readback."""
    for spec in world.fields:
        keys = [k for k, _ in world.take_dirty(spec.name)]
        for desc in coalesce_uploads(world, spec.name, keys):
            backend.upload(desc)
    keys = tuple(world.keys())
    backend.dispatch(DispatchDesc(handle, "h", len(keys)))
    backend.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY, chunk_keys=keys, versions=tuple(world.version(k) for k in keys)))


def test_a_frame_hands_the_backend_uploads_in_field_then_slot_order_before_dispatch_and_readback():
    w = make_world()
    be = RecordingBackend()
    assert isinstance(be, GpuBackend)
    for spec in w.fields:
        be.register_field(field_mirror_desc(w, spec.name))
    h = GpuProductHandle("sum", 1)
    w.take_dirty()
    w.write(8, "h", 1.0)
    w.write(5, "h", 1.0)
    w.set_tile(6, "solid", (1, 1), True)
    w.write(7, "h", 1.0)
    frame(w, be, h)
    assert be.calls == [
        ("field", "h", 512),
        ("field", "solid", 128),
        ("upload", "h", 0, 64, (5,)),
        ("upload", "h", 128, 128, (7, 8)),
        ("upload", "solid", 16, 16, (6,)),
        ("dispatch", "sum", "h", 4),
        ("readback", "sum", ReadbackPolicy.SUMMARY, (5, 6, 7, 8), tuple(w.version(k) for k in (5, 6, 7, 8))),
    ]
    be.calls.clear()
    frame(w, be, h)
    assert [c[0] for c in be.calls] == ["dispatch", "readback"]  # nothing dirty, nothing uploaded


# ---- the package facade -------------------------------------------------------------------


def test_the_gpu_facade_exports_a_sorted_all_of_importable_names():
    assert gpu.__all__ == sorted(gpu.__all__)
    for name in gpu.__all__:
        assert getattr(gpu, name) is not None


def test_importing_the_world_and_gpu_descriptors_does_not_import_wgpu():
    code = "import sys, engine_plugin.world, engine_plugin.gpu; engine_plugin.gpu.NoGpuBackend(); print('wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_frames_fast_upload_spans_are_the_dataclass_itself():
    """take_dirty_changes builds its spans without the frozen dataclass's __init__ (cost): they
    must be the very objects UploadDesc(...) makes, field for field, frozen and replaceable."""
    import dataclasses

    from engine_plugin.gpu.descriptors import UploadDesc, _new_upload_desc, take_dirty_changes

    names = [f.name for f in dataclasses.fields(UploadDesc)]
    w = World((4, 4), {"m": np.float32}, max_chunks=16)
    for k in (1, 2, 3, 7, 9, 10):
        w.add(k)
    found = take_dirty_changes(w, "m", max_gap=1)
    assert found.spans
    for span in found.spans:
        values = [getattr(span, n) for n in names]
        assert list(vars(span)) == names  # every field, in order, and nothing else
        assert span == UploadDesc(*values) and repr(span) == repr(UploadDesc(*values))
        with pytest.raises(dataclasses.FrozenInstanceError):
            span.nbytes = 0  # type: ignore[misc]
        assert dataclasses.replace(span, nbytes=8).nbytes == 8
        np.testing.assert_array_equal(span.data(), w.slab("m", span.first_slot, span.slot_count))
    made = _new_upload_desc(*[None] * len(names))
    assert list(vars(made)) == names
