"""A dead local bake process (killed by a supervisor or the OOM killer, or crashed by the
driver's compiler) breaks a ``ProcessPoolExecutor`` for good: every queued chunk of every asset
came back failed as "the bake worker failed: WorkerDied", blamed on assets that did nothing
wrong, and the surviving workers sat idle (review helper 123). The runner now starts a new pool
for the unfinished chunks, and isolates a chunk that kills its worker again."""

from __future__ import annotations

import dataclasses
import glob
import os
import signal

from engine_plugin.bake.plan import chunk_jobs, plan_assets
from engine_plugin.bake.runners import ProcessPoolRunner, WorkerDied
from engine_plugin.bake.worker import ChunkResult

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _jobs(workers: int) -> list:
    folders = sorted(glob.glob(os.path.join(REPO, "assets", "samples", "*.computeShader")))
    plans, _ = plan_assets(folders)
    todo = [(p, list(p.items)) for p in plans if p.error is None and p.items]
    jobs = chunk_jobs(todo, workers, validate=False)
    assert len(jobs) >= 4, "the samples must make several chunks"
    return jobs


class _KillsItsWorker:
    """Unpickled in the worker as os._exit(1): a chunk whose worker dies every time it runs it."""

    def __reduce__(self):
        return (os._exit, (1,))


def test_a_pool_worker_killed_mid_bake_fails_no_chunk_and_is_reported():
    jobs = _jobs(2)
    got, killed = {}, []
    with ProcessPoolRunner(2) as runner:
        for job, result in runner.run(jobs):
            got[job.index] = result
            if not killed:
                pid = next(iter(runner._pool._processes))  # one of the live workers
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        lost = runner.events(final=True)
    failed = {i: r for i, r in got.items() if not isinstance(r, ChunkResult)}
    assert not failed, f"chunks failed by another process's death: {failed}"
    assert sorted(got) == sorted(job.index for job in jobs)
    assert lost and lost[0].chunks, "the lost worker and the chunks run again must be reported"


def test_a_chunk_that_kills_its_worker_fails_alone():
    jobs = _jobs(2)
    culprit = dataclasses.replace(jobs[1], items=(_KillsItsWorker(),), index=10_000)
    got = {}
    with ProcessPoolRunner(2) as runner:
        for job, result in runner.run([culprit, *jobs]):  # first: the others are queued behind it
            got[job.index] = result
    assert isinstance(got.pop(10_000), WorkerDied)
    failed = {i: r for i, r in got.items() if not isinstance(r, ChunkResult)}
    assert not failed, f"chunks failed with the one that kills its worker: {failed}"
    assert sorted(got) == sorted(job.index for job in jobs)
