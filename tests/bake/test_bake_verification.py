"""The bake client writes nothing a worker sends without checking it against what it can
re-derive: the keys it asked for, and the lowering (pure and fast: the client lowers again
and compares). A refused entry is reported as a failure naming the worker; what the cache
held stays as it was. ``engine-plugin bake --force`` rebakes."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from bake_support import copy_samples, explain, load_report, run_bake
from test_bake_driver import FakeRunner, Recorder

from engine_plugin.bake import bake
from engine_plugin.bake.worker import ChunkResult, bake_chunk
from engine_plugin.cache import VariantCache

pytestmark = pytest.mark.gpu


def _one_asset(tmp_path) -> str:
    return os.path.join(copy_samples(str(tmp_path / "assets")), "reference.computeShader")


def _tampered(job, change):
    result = bake_chunk(job)
    return ChunkResult(result.asset, result.index, tuple(change(o) for o in result.outcomes), "farm-9:666", result.versions)


def test_an_entry_whose_program_differs_from_the_clients_lowering_is_refused(tmp_path, gpu):
    asset = _one_asset(tmp_path)
    victims = []

    def evil(out):
        if out.lowered is None or victims:
            return out
        victims.append(out.key)
        source = out.lowered.source.replace("return;", "return;\n    // * 666.0", 1)
        assert source != out.lowered.source
        return replace(out, lowered=replace(out.lowered, source=source))

    cache = VariantCache(str(tmp_path / "cache"))
    progress = Recorder()
    report = bake([asset], cache, runner=FakeRunner(lambda job: _tampered(job, evil)), progress=progress)
    assert not report.ok and report.totals["failed"] == 1
    failure = report.failures[0]
    assert failure.key == victims[0] and "farm-9:666" in failure.failure.headline and "differs" in failure.failure.headline
    assert not os.path.exists(cache.path(victims[0]))  # nothing written under the asset's real key
    assert report.totals["baked"] == cache.stats(scan=True).entries == 24


def test_an_entry_under_a_key_the_client_did_not_ask_for_is_refused(tmp_path, gpu):
    asset = _one_asset(tmp_path)
    stranger = "e" * 64

    sent = []

    def answer(job):
        result = bake_chunk(job)
        if sent:
            return result
        sent.append(job)
        extra = replace(result.outcomes[0], key=stranger)
        return ChunkResult(result.asset, result.index, result.outcomes + (extra,), "farm-9:666", result.versions)

    cache = VariantCache(str(tmp_path / "cache"))
    report = bake([asset], cache, runner=FakeRunner(answer))
    assert not os.path.exists(cache.path(stranger))
    assert not report.ok
    refused = [f for f in report.failures if f.key == stranger]
    assert len(refused) == 1 and "not requested" in refused[0].failure.headline
    assert report.totals["baked"] == 25  # every requested variant still baked


def test_an_entry_for_another_spec_under_a_requested_key_is_refused(tmp_path, gpu):
    asset = _one_asset(tmp_path)

    def swap_specs(job):
        result = bake_chunk(job)
        outs = list(result.outcomes)
        if len(outs) >= 2:  # each key now carries its neighbour's variant
            outs[0], outs[1] = replace(outs[0], lowered=outs[1].lowered), replace(outs[1], lowered=outs[0].lowered)
        return ChunkResult(result.asset, result.index, tuple(outs), result.worker, result.versions)

    cache = VariantCache(str(tmp_path / "cache"))
    report = bake([asset], cache, runner=FakeRunner(swap_specs))
    assert not report.ok and report.totals["failed"] >= 2
    for f in report.failures:
        assert not os.path.exists(cache.path(f.key))


def test_a_worker_that_answers_nothing_for_a_requested_variant_fails_it(tmp_path, gpu):
    asset = _one_asset(tmp_path)

    def drop_first(job):
        result = bake_chunk(job)
        return ChunkResult(result.asset, result.index, result.outcomes[1:], result.worker, result.versions)

    report = bake([asset], str(tmp_path / "cache"), runner=FakeRunner(drop_first))
    assert not report.ok
    assert report.totals["baked"] + report.totals["failed"] == 25
    assert any("answered nothing" in f.failure.headline for f in report.failures)


def test_bake_force_on_the_command_line_rebakes_what_the_cache_holds(tmp_path):
    root = copy_samples(str(tmp_path / "assets"))
    particles = os.path.join(root, "particles.computeShader")
    first = run_bake([particles, "--cache", "cache", "-j", "1", "--progress", "none"], cwd=str(tmp_path))
    assert first.returncode == 0, explain(first)
    again = run_bake([particles, "--cache", "cache", "-j", "1", "--progress", "none", "--force", "--json", "r.json"], cwd=str(tmp_path))
    assert again.returncode == 0, explain(again)
    report = load_report(str(tmp_path / "r.json"))
    statuses = [v["status"] for v in report["variants"]]
    assert statuses == ["baked"], statuses
