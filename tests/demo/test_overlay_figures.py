"""What the overlay shows, without a window: the figures, the headless JSON-lines log, the
demo's two engine products, the key table and the letterbox arithmetic."""

import json
import os
import shutil
import time

import numpy as np
import pytest
from demo_support import frames_until

from engine_plugin.assets import AssetLibrary
from engine_plugin.demo.figures import Diagnostic, Figures
from engine_plugin.demo.game import HeatDemo, demo_assets
from engine_plugin.demo.headless import run_headless
from engine_plugin.demo.keys import KEYS, action_for, help_lines
from engine_plugin.demo.present import fit_viewport
from engine_plugin.demo.products import HOT_THRESHOLD, PRODUCTS, hotspots_fallback, summary_fallback
from engine_plugin.engine import Engine, FrameStats
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World


@pytest.fixture()
def assets_copy(tmp_path):
    root = tmp_path / "assets"
    shutil.copytree(demo_assets(), root)
    return str(root)


def test_headless_log_has_the_overlay_figures_every_n_frames_and_names_a_broken_file_at_line_and_column(assets_copy, tmp_path):
    log = tmp_path / "out" / "figures.jsonl"
    demo = HeatDemo(assets_copy, str(tmp_path / "cache"))
    try:
        summary = run_headless(demo, 20, str(tmp_path / "snap.png"), out=open(os.devnull, "w"), log=str(log), log_every=5)
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [r["frame"] for r in records] == [5, 10, 15, 20]
        for r in records:
            assert set(r) >= {"frame_ms", "fps", "gpu_ms", "uploads", "readbacks_in_flight", "stale_per_s", "reloads", "errors"}
            assert set(r["gpu_ms"]) == set(PRODUCTS)  # None ("n/a") until the engine times products
            assert r["errors"] == [] and r["fps"] > 0
        assert records[-1]["heat"]["heat_max"] > 0.0 and os.path.getsize(tmp_path / "snap.png") > 1000
        assert summary["log"] == str(log)

        # A broken save: the next log line carries the diagnostic, file:line:col, line and caret.
        wgsl = os.path.join(assets_copy, "colorize.computeShader", "colorize.wgsl")
        good = open(wgsl).read()
        with open(wgsl, "w") as f:
            f.write(good.replace("let v = field_get(tile);", "let v = field_get(tile)"))
        demo.library.request_reload()
        run_headless(demo, 1, None, out=open(os.devnull, "w"), log=str(log))
        deadline = time.monotonic() + 60.0  # the reload worker prepares it off-thread; a frame applies it
        while not demo.figures.diagnostics and time.monotonic() < deadline:
            run_headless(demo, 1, None, out=open(os.devnull, "w"), log=str(log))
            time.sleep(0.001)
        (record,) = [json.loads(line) for line in log.read_text().splitlines()]
        (error,) = record["errors"]
        assert error["location"] == "colorize.computeShader/colorize.wgsl:27:5"
        assert error["source"].strip().startswith("let t = (v - params.lo)") and error["caret"].strip() == "^"
        assert len(error["caret"]) - 1 == len(error["source"]) - len(error["source"].lstrip())  # under the 'l'
        assert any(r["kind"] == "failed" and r["asset"] == "colorize.computeShader" for r in record["reloads"])
    finally:
        demo.close()


def _heat_world(chunks: int = 6) -> World:
    world = World((32, 32), {"heat": np.float32}, max_chunks=chunks)
    rng = np.random.default_rng(18)
    for k in range(chunks):
        world.add(k, {"heat": rng.random((32, 32), dtype=np.float32)})
    return world


def _records(engine: Engine) -> dict:
    got: dict = {"summary": {}, "hotspots": {}}
    for name, params in (("summary", None), ("hotspots", {"threshold": HOT_THRESHOLD})):
        fallback = summary_fallback if name == "summary" else hotspots_fallback
        engine.register_product(
            f"{name}.computeShader", key=name, fields={"heat": "heat"}, policy=ReadbackPolicy.SUMMARY,
            apply=lambda r, n=name: got[n].update(r.by_chunk()), cpu_fallback=fallback, params=params,
        )
    deadline = time.monotonic() + 30
    while True:  # until nothing is owed or in flight (the backend's readbacks too)
        engine.frame()
        if engine.idle and getattr(engine.backend, "inflight_readbacks", 0) == 0:
            return got
        assert time.monotonic() < deadline, f"not idle after 30 s: {engine!r}"
        time.sleep(0.001)


def test_demo_products_follow_the_product_contract_and_equal_their_cpu_fallbacks_bit_for_bit(gpu, tmp_path):
    world = _heat_world()
    library = AssetLibrary(demo_assets(), str(tmp_path / "cache"))
    gpu_engine = Engine(world, library)
    assert gpu_engine.gpu_active
    on_gpu = _records(gpu_engine)
    world.mark_dirty()
    on_cpu = _records(Engine(world, library, backend=NoGpuBackend()))
    for name in ("summary", "hotspots"):
        assert sorted(on_gpu[name]) == sorted(on_cpu[name]) == world.keys()
        for key in world.keys():
            assert on_gpu[name][key].tobytes() == on_cpu[name][key].tobytes(), f"{name} chunk {key}"
    values = world.mirror("heat").reshape(world.max_chunks, -1)[world.slot(0)]
    assert on_gpu["summary"][0][0] == values.max()
    assert on_gpu["hotspots"][0][0] == (values > np.float32(HOT_THRESHOLD)).sum() and on_gpu["hotspots"][0][1] == values.argmax()
    gpu_engine.close()
    library.close()


def test_gpu_time_shows_na_until_the_engine_reports_it_then_stays_latched():
    fig = Figures(products=("summary", "hotspots"))
    fig.frame_done(FrameStats(frame=1, readbacks_stale=2), 0.001, inflight=3, now=10.0)
    assert fig.gpu_text("summary") == "n/a" and fig.record()["gpu_ms"] == {"summary": None, "hotspots": None}
    fig.frame_done(FrameStats(frame=2, product_gpu_ms={"summary": 0.25}, gpu_timing="timestamps"), 0.001, inflight=1, now=10.5)
    fig.frame_done(FrameStats(frame=3, readbacks_stale=1), 0.001, inflight=0, now=10.75)  # no new times this frame
    assert fig.gpu_text("summary") == "0.250 ms" and fig.gpu_text("hotspots") == "n/a" and fig.gpu_timing == "timestamps"
    assert fig.stale_per_s == 3.0 and fig.readbacks_in_flight == 0  # 2 + 1 within the last second
    fig.frame_done(FrameStats(frame=3, product_gpu_ms={"summary": 0.25, "heat_step": 1.5}), 0.001, inflight=0, now=10.8)
    assert fig.product_names() == ("summary", "hotspots", "heat_step")  # a product the demo does not name is listed too
    assert fig.record()["gpu_ms"] == {"summary": 0.25, "hotspots": None, "heat_step": 1.5}
    fig.frame_done(FrameStats(frame=4), 0.001, inflight=0, now=11.6)  # 10.0 and 10.5 fall out of the last second
    assert fig.stale_per_s == 1.0 and fig.fps == pytest.approx(2 / 0.85) and fig.frame_ms == pytest.approx(800.0)


def test_a_frame_timing_some_products_only_keeps_the_others_last_times():
    # Review helper 109: after a hot reload the products' timed frames fall apart (each is
    # timed one frame in 16); a frame's times replaced the whole latch, so the overlay showed
    # n/a for most products most of the time.
    fig = Figures(products=("summary", "hotspots"))
    fig.frame_done(FrameStats(frame=1, product_gpu_ms={"summary": 0.25, "hotspots": 0.5}, gpu_timing="timestamps"), 0.001, inflight=0, now=1.0)
    fig.frame_done(FrameStats(frame=2, product_gpu_ms={"hotspots": 0.75}, gpu_timing="timestamps"), 0.001, inflight=0, now=1.1)
    assert fig.record()["gpu_ms"] == {"summary": 0.25, "hotspots": 0.75}
    assert fig.gpu_text("summary") == "0.250 ms"
    # ...while it is measured (review helper 110): a product no longer timed goes back to n/a,
    # one the demo does not name leaves the list.
    fig.frame_done(FrameStats(frame=3, product_gpu_ms={"scratch": 9.0}), 0.001, inflight=0, now=1.2)
    for frame in range(4, 1000):  # 16 s at 60 frames a second
        fig.frame_done(FrameStats(frame=frame, product_gpu_ms={"hotspots": 0.5} if frame % 16 == 0 else {}), 0.001, inflight=0, now=1.2 + frame / 60)
    assert fig.record()["gpu_ms"] == {"summary": None, "hotspots": 0.5}
    assert fig.product_names() == ("summary", "hotspots")


def test_diagnostic_splits_a_rendered_error_into_location_source_line_and_caret():
    text = "heat_step.computeShader/heat_step.wgsl:7:13: unknown identifier 'heigth'\n    let h = heigth;\n            ^"
    d = Diagnostic.from_error("heat_step", text)
    assert (d.location, d.message) == ("heat_step.computeShader/heat_step.wgsl:7:13", "unknown identifier 'heigth'")
    assert d.lines() == [text.splitlines()[0], "    let h = heigth;", "            ^"]


def test_diagnostic_of_an_error_without_a_place_names_the_asset_and_keeps_the_whole_message():
    # Review helper 199: "unknown param 'cooling'; product 'heat_step' takes: ..." put the text
    # before its first ": " into the location field.
    from engine_plugin.errors import PluginError, Span

    text = "unknown param 'cooling'; product 'heat_step' takes: source, heat"
    d = Diagnostic.from_error("heat_step", text)
    assert (d.location, d.message) == ("heat_step", text)
    d = Diagnostic.from_error("heat_step", PluginError(text, Span("/r/heat_step.computeShader/bindings.yaml")), root="/r")
    assert (d.location, d.message) == ("heat_step.computeShader/bindings.yaml", text)
    # Not by what the working folder holds (review helper 201: "tmp" became the place when run from /).
    assert Diagnostic.from_error("k", "tmp: something: broken").location == "k"
    assert Diagnostic.from_error("k", "C:\\game\\k.computeShader\\bindings.yaml: broken").location == "C:\\game\\k.computeShader\\bindings.yaml"


def test_keys_cover_every_action_and_the_overlay_lists_them():
    assert {b.action for b in KEYS} == {"toggle_overlay", "pause", "step", "reset", "reload", "screenshot", "quit"}
    assert action_for({"key": "O"}) == action_for({"key": "o"}) == "toggle_overlay"
    assert action_for({"key": "F5"}) == "reload" and action_for({"key": "F12"}) == "screenshot" and action_for({"key": "x"}) is None
    text = " ".join(help_lines())
    assert all(f"{b.label} {b.short}" in text for b in KEYS)


@pytest.mark.parametrize(
    "target, want",
    [((512, 512), (0, 0, 512, 512)), ((800, 400), (200, 0, 400, 400)), ((400, 800), (0, 200, 400, 400)), ((1024, 512), (256, 0, 512, 512))],
)
def test_the_picture_fits_the_window_with_its_aspect_and_centred_bars(target, want):
    assert fit_viewport((512, 512), target) == want


def _edit(path: str, old: str, new: str) -> None:
    text = open(path).read()
    assert old in text, f"{old!r} not in {path}"
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


def test_the_readme_layout_edit_widens_the_summary_record_and_an_unbound_field_input_is_refused_at_its_line(assets_copy, tmp_path):
    """README, "a layout edit": summary's record grows from vec2 to vec4 (coldest tile, spread);
    the product re-registers and the overlay shows the new lanes. A kernel the engine cannot
    bind (a field input the demo binds to no world field) keeps the old one running and shows
    the product error at its bindings.yaml line."""
    demo = HeatDemo(assets_copy, str(tmp_path / "cache"))
    try:
        frames_until(demo, lambda: demo.figures.heat.get("heat_max", 0) > 0, "a first summary")
        folder = os.path.join(assets_copy, "summary.computeShader")
        yaml_path, wgsl = os.path.join(folder, "bindings.yaml"), os.path.join(folder, "summary.wgsl")
        _edit(yaml_path, "element: vec2<f32>", "element: vec4<f32>")
        _edit(wgsl, "var hottest = heat_get(base);", "var hottest = heat_get(base);\n    var coldest = hottest;")
        _edit(wgsl, "hottest = max(hottest, v);", "hottest = max(hottest, v);\n        coldest = min(coldest, v);")
        _edit(wgsl, "vec2<f32>(hottest, sum * params.inv_tile_count)", "vec4<f32>(hottest, sum * params.inv_tile_count, coldest, hottest - coldest)")
        demo.library.request_reload("summary.computeShader")
        frames_until(demo, lambda: "summary_extra" in demo.figures.heat, "the widened record")
        (entry,) = [r for r in demo.figures.reloads if r.asset == "summary.computeShader"]
        assert (entry.kind, entry.recompiled, entry.generation) == ("layout", 1, 1) and entry.ms > 0
        coldest, spread = demo.figures.heat["summary_extra"]
        assert 0.0 <= coldest < spread <= demo.figures.heat["heat_max"] + 1e-6
        assert demo.figures.diagnostics == []

        _edit(yaml_path, "  - { name: heat,   kind: buffer, access: read, element: f32 }",
              "  - { name: heat,   kind: buffer, access: read, element: f32 }\n"
              "  - { name: moisture, kind: buffer, access: read, element: f32 }")
        demo.library.request_reload("summary.computeShader")
        frames_until(demo, lambda: demo.figures.diagnostics, "the contract error")
        (diag,) = demo.figures.diagnostics
        assert diag.asset == "summary" and diag.location == "summary.computeShader/bindings.yaml:7:5"  # line and column
        assert "'moisture' is bound to no world field" in diag.message and diag.source.strip().startswith("- { name: moisture")
        assert diag.caret == " " * diag.source.index("{") + "^"  # under the entry, as schema errors put it
        assert "summary_extra" in demo.figures.heat  # the previous kernel keeps running
        # The reload log says the engine refused it (review helper 204: only a "layout" reload
        # that looked as if it went through), once.
        entries = [r for r in demo.figures.reloads if r.asset == "summary.computeShader"]
        assert [r.kind for r in entries] == ["layout", "layout", "refused"], entries
        assert "refused by the engine" in entries[-1].text()
        frames_until(demo, lambda: demo.figures.frame > 0, "one more frame")
        assert [r.kind for r in demo.figures.reloads if r.asset == "summary.computeShader"].count("refused") == 1
        # A second save the engine refuses with the same error is said again (review helper 208).
        with open(wgsl, "a") as f:
            f.write("// a comment\n")
        demo.library.request_reload("summary.computeShader")
        frames_until(demo, lambda: len([r for r in demo.figures.reloads if r.asset == "summary.computeShader"]) >= 5, "the second refusal")
        assert [r.kind for r in demo.figures.reloads if r.asset == "summary.computeShader"][-2:] == ["body", "refused"]
    finally:
        demo.close()


def test_the_overlay_shows_a_window_of_a_very_long_line_with_the_caret_under_the_column():
    # It carried the whole 40,000-character line and a caret line as long (review helper 178).
    from engine_plugin.errors import PluginError, Span

    line = "x" * 20_000 + "BAD" + "y" * 20_000
    d = Diagnostic.from_error("k", PluginError("an error", Span("k/kernel.wgsl", 3, 20_001, line)))
    assert len(d.source) < 200 and d.source.startswith("…") and d.source.endswith("…")
    assert d.source[d.caret.index("^") : d.caret.index("^") + 3] == "BAD"
    tabbed = Diagnostic.from_error("k", PluginError("an error", Span("k/kernel.wgsl", 3, 3, "\tab")))
    assert tabbed.source == "    ab" and tabbed.caret == "     ^"  # under 'b', the tab drawn as 4 columns
