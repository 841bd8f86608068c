"""Substrate pages and runs on the real device: placement, free, handles, uploads and reads."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from engine_plugin import abi
from engine_plugin.errors import PluginError, StaleHandleError
from engine_plugin.substrate import Substrate, StaleRunError, SubstrateError, find_run


@pytest.fixture
def arena(gpu):
    s = Substrate(gpu, page_bytes=16 * 1024, label="test arena")
    yield s
    s.close()


def test_runs_start_at_the_storage_offset_alignment_and_bind_alone(gpu, arena):
    align_bytes = gpu.limit("min-storage-buffer-offset-alignment")
    assert arena.align_words * 4 == max(4, align_bytes)
    runs = [arena.alloc(el, count) for el, count in [("u32", 1), ("vec3<f32>", 7), ("f32", 0), ("vec2<i32>", 13), ("vec4<u32>", 3)]]
    for h in runs:
        page, base, length = arena.placement(h)
        assert base % arena.align_words == 0 and length == h.length
    # Binding a run alone at its base offset is accepted by wgpu (a misaligned offset is not).
    layout = gpu.device.create_bind_group_layout(
        entries=[{"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "storage"}}]
    )
    for h in runs:
        gpu.device.create_bind_group(layout=layout, entries=[{"binding": 0, "resource": h.binding_resource()}])
    arena.check()


def test_atomic_runs_stand_only_in_atomic_pages(arena):
    plain = [arena.alloc("u32", 10) for _ in range(3)]
    atomic = [arena.alloc("i32", 10, atomic=True) for _ in range(3)]
    assert {h.page for h in plain}.isdisjoint({h.page for h in atomic})
    assert all(arena.page_info(h.page).atomic for h in atomic)
    assert not any(arena.page_info(h.page).atomic for h in plain)
    assert arena.stats()["atomic_pages"] == 1


def test_a_run_larger_than_a_page_gets_a_page_of_its_own_dropped_on_free(arena):
    small = arena.alloc("f32", 16)
    big = arena.alloc("vec4<f32>", 4096)  # 64 KiB > the 16 KiB page
    assert big.page != small.page and arena.placement(big).base_word == 0
    assert arena.placement(big).page.size >= big.nbytes
    assert arena.stats()["pages"] == 2
    data = np.arange(4096 * 4, dtype=np.float32).reshape(4096, 4)
    arena.write(big, data)
    np.testing.assert_array_equal(abi.read(big), data)
    arena.free(big)
    assert arena.stats()["pages"] == 1


def test_freed_words_coalesce_and_are_reused(arena):
    a, b, c = (arena.alloc("u32", arena.align_words * 4) for _ in range(3))
    assert a.page == b.page == c.page
    arena.free(b)
    arena.free(a)
    arena.free(c)
    info = arena.page_info(a.page)
    assert info.free.blocks == [(0, info.words)]
    again = arena.alloc("u32", arena.align_words * 12)
    assert (again.page, again.base) == (a.page, 0)
    arena.check()


def test_double_free_and_stale_handles_fail_naming_the_run(arena):
    h = arena.alloc("vec3<f32>", 5, name="pos")
    arena.free(h)
    with pytest.raises(StaleRunError, match=r"run 'pos' \(vec3<f32> x 5.*stale.*freed") as info:
        arena.free(h)
    assert isinstance(info.value, StaleHandleError) and isinstance(info.value, LookupError)
    with pytest.raises(StaleRunError):
        arena.placement(h)
    with pytest.raises(StaleRunError):
        abi.read(h)
    # The slot comes back with the next generation: the old handle never reaches the new run.
    new = arena.alloc("vec3<f32>", 5)
    assert new.slot == h.slot and new.generation == h.generation + 1 and not h.live and new.live
    with pytest.raises(StaleRunError):
        arena.write(h, np.zeros((5, 3)))


def test_handles_are_frozen_and_hashable(arena):
    h = arena.alloc("u32", 3)
    with pytest.raises(AttributeError):
        h.base = 5  # type: ignore[misc]
    assert {h: 1}[h] == 1 and h == arena.runs()[0]


def test_vec3_runs_are_twelve_bytes_an_element_flat(gpu, arena):
    pad = arena.alloc("u32", 1)
    h = arena.alloc("vec3<f32>", 4)
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    arena.write(h, values)
    page, base, _ = arena.placement(h)
    raw = np.frombuffer(gpu.queue.read_buffer(page, base * 4, 48), dtype="<f4")
    np.testing.assert_array_equal(raw, values.reshape(-1))
    assert h.read_back().shape == (4, 3)
    np.testing.assert_array_equal(h.read_back(), values)
    np.testing.assert_array_equal(abi.read(h, as_u32=True), values.view("<u4"))
    assert abi.read(pad).shape == (1,)


def test_writes_cast_by_value_go_at_an_element_offset_and_refuse_overruns(arena):
    h = arena.alloc("i32", 6)
    arena.write(h, np.array([1.0, -2.0, 3.0]), start=2)  # floats cast by value, like run inputs
    np.testing.assert_array_equal(h.read_back(), [0, 0, 1, -2, 3, 0])
    with pytest.raises(SubstrateError, match="value 1.9 is not a whole number"):  # truncated to 1 before (review helper 126)
        arena.write(h, np.array([1.9]), start=2)
    np.testing.assert_array_equal(h.read_back(), [0, 0, 1, -2, 3, 0])
    with pytest.raises(SubstrateError, match="overruns"):
        arena.write(h, np.zeros(5), start=2)
    v = arena.alloc("vec2<f32>", 3)
    with pytest.raises(SubstrateError, match="lanes"):
        arena.write(v, np.zeros((3, 3)))
    arena.write(v, np.arange(6))  # flat is fine
    np.testing.assert_array_equal(v.read_back(), np.arange(6, dtype=np.float32).reshape(3, 2))


def test_space_reused_from_a_freed_run_is_zeroed_unless_asked_not_to(arena):
    old = arena.upload("u32", np.full(64, 0xDEADBEEF, dtype=np.uint32))
    page, base = old.page, old.base
    arena.free(old)
    fresh = arena.alloc("u32", 64)
    assert (fresh.page, fresh.base) == (page, base)
    assert not fresh.read_back().any()
    arena.write(fresh, np.full(64, 7))
    arena.free(fresh)
    dirty = arena.alloc("u32", 64, zero=False)
    assert (dirty.read_back() == 7).all()


def test_named_runs_are_unique_while_live_and_found_across_substrates(gpu, arena):
    h = arena.alloc("f32", 4, name="heat")
    assert arena.find("heat") is h and find_run("heat") == [h]
    with pytest.raises(SubstrateError, match="already named 'heat'"):
        arena.alloc("f32", 4, name="heat")
    arena.free(h)
    assert find_run("heat") == []
    again = arena.alloc("f32", 8, name="heat")
    assert arena.find("heat") is again


def test_bad_arguments_are_plugin_errors_that_say_what_was_expected(gpu, arena):
    with pytest.raises(SubstrateError, match="vec2/3/4"):
        arena.alloc("vec5<f32>", 3)
    with pytest.raises(SubstrateError, match="non-negative int"):
        arena.alloc("f32", -1)
    with pytest.raises(SubstrateError, match="binds at most"):
        arena.alloc("vec4<f32>", gpu.limit("max-storage-buffer-binding-size"))
    with pytest.raises(SubstrateError, match="page_bytes"):
        Substrate(gpu, page_bytes=0)
    with pytest.raises(PluginError, match="expected a run handle"):
        arena.free("heat")  # type: ignore[arg-type]


def test_a_substrate_takes_a_device_or_its_context(gpu):
    for dev in (gpu, gpu.device):
        s = Substrate(dev, page_bytes=4096)
        assert s.ctx is gpu
        s.close()


def test_closing_a_substrate_makes_its_handles_stale(gpu):
    s = Substrate(gpu, page_bytes=4096, label="closing")
    h = s.alloc("u32", 4, name="closing_run")
    s.close()
    assert find_run("closing_run") == []
    with pytest.raises(StaleRunError, match="closed"):
        s.placement(h)
    with pytest.raises(StaleRunError, match="closed"):
        s.alloc("u32", 4)


# -- page groups ----------------------------------------------------------------------------------
SHAPES = [("vec3<f32>", 100, False), ("f32", 300, False), ("u32", 17, True), ("vec4<f32>", 2000, False), ("i32", 1, False), ("f32", 9000, False)]


def _play(s: Substrate, key="frame", shapes=SHAPES):
    with s.with_page_group(key):
        runs = [s.alloc(el, count, atomic=atomic) for el, count, atomic in shapes]
    return runs, [(id(s.placement(h).page), h.page, h.base, h.length) for h in runs]


def test_a_page_group_places_the_same_shapes_the_same_way_every_play(arena):
    noise = [arena.alloc("f32", 50 * k + 1) for k in range(1, 8)]
    runs1, placed1 = _play(arena)
    group = arena.group("frame")
    # Runs stand only in the group's pages; the shared pool never lands there.
    assert {h.page for h in runs1} <= set(group.pages)
    assert not {h.page for h in noise} & set(group.pages)
    assert arena.free_group("frame") == len(SHAPES)
    # Churn outside the group between the plays does not move the group's runs.
    for h in noise[::2]:
        arena.free(h)
    more = [arena.alloc("vec2<f32>", 333) for _ in range(5)]
    assert not {h.page for h in more} & set(group.pages)
    runs2, placed2 = _play(arena)
    assert placed2 == placed1 and group.replayed == len(SHAPES) and group.plays == 2
    assert all(a != b for a, b in zip(runs1, runs2))  # new handles, same placement
    arena.check()


def test_a_changed_shape_rewrites_the_group_script_from_that_run_on(arena):
    _, placed1 = _play(arena)
    arena.free_group("frame")
    changed = SHAPES[:2] + [("u32", 5000, False)] + SHAPES[3:]
    _, placed2 = _play(arena, shapes=changed)
    assert placed2[:2] == placed1[:2]
    arena.free_group("frame")
    _, placed3 = _play(arena, shapes=changed)
    assert placed3 == placed2


def test_a_play_whose_previous_runs_still_stand_places_around_them(arena):
    runs1, placed1 = _play(arena)
    runs2, placed2 = _play(arena)  # nothing freed: the replayed spans are taken
    assert {(p[1], p[2]) for p in placed1}.isdisjoint({(p[1], p[2]) for p in placed2})
    arena.free_group("frame")
    _, placed3 = _play(arena)
    assert placed3 == placed1  # the script was kept
    assert arena.release_group("frame") == len(SHAPES)
    assert arena.group("frame") is None


def test_a_group_cannot_enter_itself_but_groups_nest(arena):
    with arena.with_page_group("outer"):
        a = arena.alloc("f32", 4)
        with arena.with_page_group("inner"):
            b = arena.alloc("f32", 4)
            with pytest.raises(SubstrateError, match="cannot enter itself"):
                with arena.with_page_group("inner"):
                    pass
        c = arena.alloc("f32", 4)
    assert a.group == c.group == "outer" and b.group == "inner" and a.page == c.page != b.page


# -- fragmentation --------------------------------------------------------------------------------
ELEMENTS = ["u32", "i32", "f32", "vec2<f32>", "vec3<f32>", "vec4<u32>"]


def _pattern(serial: int, h) -> np.ndarray:
    words = np.arange(h.words, dtype=np.uint32) * np.uint32(2654435761) + np.uint32(serial * 7919 + 1)
    return words


def test_alloc_free_churn_of_ten_thousand_runs_keeps_every_live_run_intact(gpu):
    rng = np.random.default_rng(20240611)
    s = Substrate(gpu, page_bytes=64 * 1024, label="churn")
    live: dict = {}
    made = 0
    while made < 10_000:
        if live and (rng.random() < 0.48 or len(live) > 600):
            keys = list(live)
            h = keys[rng.integers(len(keys))]
            s.free(h)
            del live[h]
            continue
        element = ELEMENTS[rng.integers(len(ELEMENTS))]
        count = int(rng.integers(20_000, 40_000)) if rng.random() < 0.005 else int(rng.integers(0, 400))
        h = s.alloc(element, count, atomic=bool(rng.random() < 0.15), zero=False)
        pattern = _pattern(made, h)
        s.write(h, pattern.view(h.value_type.numpy_dtype))
        live[h] = pattern
        made += 1
        if made % 2500 == 0:
            s.check()
    s.check()
    handles = list(live)
    got = s.read_many(handles, as_u32=True)
    for h, words in zip(handles, got):
        np.testing.assert_array_equal(words.reshape(-1), live[h], err_msg=h.describe())
    stats = s.stats()
    for h in handles:
        s.free(h)
    after = s.stats()
    # Everything freed: each remaining page is one free block again; big pages were dropped.
    assert after["live_runs"] == 0 and after["free_blocks"] == after["pages"] <= stats["pages"]
    assert after["free_words"] == after["page_words"]
    assert s.trim() == after["pages"] and s.stats()["pages"] == 0
    s.close()


def test_the_package_exports_a_sorted_curated_surface():
    import engine_plugin.substrate as substrate

    assert list(substrate.__all__) == sorted(substrate.__all__)
    assert all(hasattr(substrate, name) for name in substrate.__all__)
    assert {"Substrate", "RunHandle", "page_binding", "PageBinding", "StaleRunError"} <= set(substrate.__all__)


def test_a_run_on_another_devices_substrate_is_a_plugin_error_naming_the_page():
    # Substrate(device) takes the caller's device; a variant made on the plugin's own device
    # cannot bind its pages. That was a raw wgpu validation error, not a PluginError.
    from engine_plugin.errors import DispatchError

    other = wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()
    arena = Substrate(other, page_bytes=4096, label="other device")
    try:
        yaml = (
            "bindings:\n  - { name: PA, kind: page, access: read_write }\n"
            "  - { name: m, kind: column, page: PA, element: f32 }\n"
        )
        body = (
            "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
            "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n    m_set(i, 1.0);\n}\n"
        )
        variant = abi.program(key="t/other_device_page", schema=abi.parse(yaml, "t/other_device_page/bindings.yaml"), wgsl=body).variant()
        run = arena.alloc("f32", 10, name="m_other")
        with pytest.raises(DispatchError, match="another device") as info:
            variant.run(n=10, inputs={"m": run})
        assert "t/other_device_page/bindings.yaml:3" in str(info.value)
    finally:
        arena.close()


def test_none_is_no_page_group_key_so_freeing_group_none_never_frees_ungrouped_runs(arena):
    # Runs made outside any group carry the group None: a group keyed None was the same group,
    # and free_group(None) freed every ungrouped run (helper 71).
    loose = arena.alloc("f32", 8, name="loose")
    with pytest.raises(SubstrateError, match="None"):
        with arena.with_page_group(None):
            pass
    for call in (arena.free_group, arena.group_runs, arena.release_group):
        with pytest.raises(SubstrateError, match="None"):
            call(None)
    with pytest.raises(SubstrateError, match="equal itself"):  # NaN: never found again (helper 76)
        with arena.with_page_group(float("nan")):
            pass
    assert loose.live and arena.read(loose).shape == (8,)


def test_an_alloc_refused_while_clearing_reused_space_leaves_the_substrate_as_it_was():
    # Review helper 150: the run was recorded before the clearing write raised (its page's
    # buffer destroyed): the name stayed taken and its words reserved, held by nobody.
    from engine_plugin.substrate import Substrate, SubstrateError

    s = Substrate(page_bytes=4096, label="t150/alloc")
    h = s.upload("f32", np.ones(4, np.float32))
    s.free(h)
    s.page_buffer(h.page).destroy()
    before = s.stats()
    with pytest.raises(SubstrateError, match="destroyed"):
        s.alloc("f32", 4, name="x")
    after = s.stats()
    assert (after["live_runs"], after["free_words"]) == (before["live_runs"], before["free_words"]) and s.runs() == []
    s.alloc("f32", 4, name="x", zero=False)  # the name is free
