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


def _ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def test_pool_processes_are_born_ignoring_ctrl_c():
    # They ignored SIGINT only once their initializer ran, after importing: a Ctrl-C at a bake's
    # start, or just after a pool was started anew, printed their KeyboardInterrupt tracebacks
    # (review helper 124). The client handles Ctrl-C for them.
    import threading
    import time

    jobs = _jobs(2)
    born: dict[int, bool] = {}
    with ProcessPoolRunner(2) as runner:
        stop = threading.Event()

        def watch() -> None:  # each process's disposition the moment it appears
            while not stop.is_set() and len(born) < 2:
                for pid in list(getattr(runner._pool, "_processes", None) or {}):
                    if pid not in born:
                        born[pid] = _ignores_sigint(pid)  # long before its initializer runs
                time.sleep(0.0002)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            done = list(runner.run(jobs[:2]))  # in the main thread, as a bake runs it
        finally:
            stop.set()
            watcher.join(10)
    assert born and all(born.values()), f"pool processes started without ignoring SIGINT: {born}"
    assert len(done) == 2 and all(isinstance(r, ChunkResult) for _, r in done)


def test_a_lost_pool_process_is_named_as_the_rows_name_a_process():
    # --json lost_workers[].worker and the closing line said 'of the local pool (its unfinished
    # chunks, ...)' where a worker's name belongs (review helper 241): the dead process's
    # host:pid now, as each variant's ``worker`` names the process that baked it.
    import socket

    jobs = _jobs(2)
    killed: list[int] = []
    with ProcessPoolRunner(2) as runner:
        for _job, _result in runner.run(jobs):
            if not killed:
                pid = next(iter(runner._pool._processes))
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        lost = runner.events(final=True)
    assert lost and [event.worker for event in lost] == [f"{socket.gethostname()}:{killed[0]}"], lost


def test_a_lost_dask_worker_names_no_chunk_that_already_ended():
    # After KilledWorker failed a chunk, the removal of the worker that died last still said
    # "1 chunk(s) (4 variants) not finished are run again" (review helper 241): a chunk the
    # runner has handed back is not run again.
    from engine_plugin.bake.runners import DaskRunner

    class Client:
        def get_events(self, topic):
            return [(1.0, {"action": "remove-worker", "worker": "tcp://w1", "processing-tasks": ["k3", "k4"]})]

    runner = DaskRunner.__new__(DaskRunner)
    runner.client, runner._polled, runner._known_events, runner._lost = Client(), 0.0, set(), set()
    runner._index_of, runner._ended = {"k3": 3, "k4": 4}, {3}
    lost = runner.events(final=True)
    assert [(event.worker, event.chunks) for event in lost] == [("tcp://w1", (4,))], lost
