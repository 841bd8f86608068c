"""Batch baking: lower and validate every variant of every asset into the variant cache.

    from engine_plugin.bake import bake, ProcessPoolRunner
    report = bake(["assets"], "cache", runner=ProcessPoolRunner(4))
    report.ok, report.totals          # {"variants": 200, "baked": 200, "skipped": 0, "failed": 0}

``engine-plugin bake [ASSETS...] --cache DIR --jobs N [--variants-from usage.msgpack]
[--json REPORT] [--scheduler ADDRESS | --dask-local N]`` is this, from the command line.

How a bake runs
---------------
1. **Plan** (client, no device): read each asset once, parse it, enumerate its variants (the
   schema's ``bake:`` list, else the cross product of its options; or the variants a usage
   log recorded, re-resolved against the schema as it is now) and compute each content key.
2. **Skip** what the cache already holds. The check decodes the entry (tens of
   microseconds), so a corrupt entry is baked again instead of skipped. When nothing is left,
   no worker, pool or cluster is started at all.
3. **Run** the rest in chunks (a few per worker, at most 16 variants each, one asset per
   chunk) on a runner: this process (``--jobs 1``), a pool of ``spawn``-ed processes
   (``--jobs N``; wgpu is not fork-safe), or Dask. Each worker process lowers and then
   compiles each variant on *its own* device (lavapipe without a GPU), which is the
   validation; the compiled pipeline is dropped at once. The driver still keeps native memory
   of every compile until the process ends (~0.28 MiB a variant on lavapipe, review helper
   241), so a local pool is replaced after ~2048 variants a process
   (``ENGINE_PLUGIN_BAKE_WORKER_VARIANTS``); ``--jobs 1`` (this process) and Dask workers (the
   cluster's) are not replaced and grow with what they compile: a large bake wants ``--jobs
   N``, a cluster's workers restarted between large bakes.
4. **Write** the entries and report: a summary table, every failure as ``path:line:col:
   message`` naming the user's own file (identical messages are printed once and counted),
   a JSON report, and the exit status (1 when anything failed).

Who writes the cache: the client, for every runner
--------------------------------------------------
Workers are pure: they get the asset's *texts* (never paths to read) and return the lowered
variants; the client process writes each entry with ``VariantCache.put`` as results arrive.
We chose this over workers writing to a shared cache folder (which the atomic writes would
make safe) because:

- a Dask cluster does not promise a file system shared with the client: workers on a farm
  see their own disks, and ``--cache DIR`` names a folder on the machine running the
  command. Returning entries needs no shared mount, no identical paths, and no asset
  checkout on the workers; only the same ``engine_plugin`` build (checked: a worker whose
  cache format or lowering version differs fails its chunks with a message saying so);
- one writer keeps the cache's LRU cap and its counters right (each ``VariantCache``
  instance only knows its own writes) and makes "baked" mean "the entry is on disk";
- entries are small (a few KiB to a few hundred; a lowered variant pickles to about the
  size of its msgpack entry), so the traffic is a fraction of the compile time, and writing
  on the client costs ~0.1 ms an entry.

The same choice holds for the local pool, so the local and Dask paths produce byte-identical
entries under identical file names. The cost: a farm baking many thousands of variants funnels
their bytes through the scheduler to one client; at ~8 KiB an entry that is ~80 MiB per 10,000
variants, acceptable for a build step.

Failures are data, never exceptions: a schema error fails its asset (counted as one failure),
a refused variant fails alone, a worker that died or a lost Dask worker fails its chunk's
variants with a message naming the asset; the other assets bake regardless.
"""

from .driver import bake
from .plan import AssetPlan, chunk_jobs, match_usage, plan_assets
from .report import BakeReport
from .runners import DASK_INSTALL_HINT, DaskMissingError, DaskRunner, InlineRunner, ProcessPoolRunner
from .worker import BakeItem, ChunkJob, ChunkResult, Failure, VariantOutcome, bake_chunk

__all__ = [
    "AssetPlan",
    "BakeItem",
    "BakeReport",
    "ChunkJob",
    "ChunkResult",
    "DASK_INSTALL_HINT",
    "DaskMissingError",
    "DaskRunner",
    "Failure",
    "InlineRunner",
    "ProcessPoolRunner",
    "VariantOutcome",
    "bake",
    "bake_chunk",
    "chunk_jobs",
    "match_usage",
    "plan_assets",
]
