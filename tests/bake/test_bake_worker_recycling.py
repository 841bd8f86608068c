"""A bake worker's memory grows with every variant it compiles (wgpu-native and lavapipe keep
native objects of each pipeline: ~0.28 MiB a variant, never freed; a 65,536-variant bake took
each of its 2 processes to 9.6 GB, review helper 241). The local pool is replaced after a
bounded number of variants; every chunk still comes back exactly once."""

from __future__ import annotations

import glob
import os

from engine_plugin.bake.plan import chunk_jobs, plan_assets
from engine_plugin.bake.runners import ProcessPoolRunner
from engine_plugin.bake.worker import ChunkResult

from bake_support import SAMPLE_VARIANTS, copy_samples, entries, explain, load_report, run_bake

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pool_processes_are_replaced_after_their_quota_and_every_chunk_comes_back_once():
    folders = sorted(glob.glob(os.path.join(REPO, "assets", "samples", "*.computeShader")))
    plans, _ = plan_assets(folders)
    todo = [(p, list(p.items)) for p in plans if p.error is None and p.items]
    jobs = chunk_jobs(todo, 2, validate=False)
    got: dict[int, list] = {}
    with ProcessPoolRunner(2, worker_variants=4) as runner:
        for job, result in runner.run(jobs):
            got.setdefault(job.index, []).append(result)
    assert sorted(got) == sorted(job.index for job in jobs)
    assert all(len(results) == 1 and isinstance(results[0], ChunkResult) for results in got.values()), got
    pids = {results[0].worker for results in got.values()}
    # 26 variants, at most 4 a process (8 a pool of 2): several pools, never the first 2 processes only.
    assert len(pids) > 2, pids
    keys = [out.key for results in got.values() for out in results[0].outcomes]
    assert sorted(keys) == sorted(item.key for job in jobs for item in job.items)


def test_a_bake_whose_processes_are_recycled_writes_every_entry_and_counts_it_once(tmp_path):
    assets = copy_samples(str(tmp_path / "assets"))
    cache, report = str(tmp_path / "cache"), str(tmp_path / "r.json")
    prelude = "import os; os.environ['ENGINE_PLUGIN_BAKE_WORKER_VARIANTS'] = '5'"
    proc = run_bake([assets, "--cache", cache, "--jobs", "2", "--json", report, "-q"], str(tmp_path), prelude=prelude, timeout=300)
    assert proc.returncode == 0, explain(proc)
    data = load_report(report)
    assert data["totals"]["baked"] == SAMPLE_VARIANTS and data["totals"]["failed"] == 0, data["totals"]
    assert len(entries(cache)) == SAMPLE_VARIANTS
    rows = data["variants"]
    assert len(rows) == SAMPLE_VARIANTS and len({r["key"] for r in rows}) == SAMPLE_VARIANTS
    assert len({r["worker"] for r in rows}) > 2, "the pool's processes were never replaced"
    assert not data["lost_workers"], data["lost_workers"]  # a replaced process is no lost worker
