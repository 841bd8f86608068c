"""Where chunks run: this process, a local ``spawn`` process pool, or a Dask cluster.

Every runner is a context manager with ``workers`` (how many chunks run at once, for
chunk sizing), ``label`` (for the summary), ``deadlines`` (whether jobs may carry a
``compile_timeout``: a runner without it gets none), ``run(jobs)``, which yields
``(job, ChunkResult | BaseException)`` in completion order, and ``events(final=False)``, which
answers what happened to the workers since the last call (a lost Dask worker and the chunks
that were running there, which the scheduler runs again elsewhere). A runner never raises for
one chunk: a worker that died, a chunk that lost too many workers or an unpicklable result
comes back as the exception, and the driver fails that chunk's variants with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import glob
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

from ..errors import PluginError
from . import worker as _worker
from .worker import ChunkJob, ChunkResult, Failure, VariantOutcome, bake_chunk

__all__ = [
    "DASK_INSTALL_HINT",
    "DaskMissingError",
    "DaskRunner",
    "InlineRunner",
    "LostWorker",
    "ProcessPoolRunner",
    "SchedulerUnreachable",
    "WorkerDied",
    "import_distributed",
]

Yielded = Iterator[tuple[ChunkJob, "ChunkResult | BaseException"]]

DASK_INSTALL_HINT = (
    "the Dask options (--scheduler, --dask-local) need the optional 'dask' extra; install it with: pip install 'engine_plugin[dask]' "
    "(in a checkout: pip install '.[dask]'), and on a cluster the same engine_plugin build on every worker"
)
DEFAULT_CONNECT_TIMEOUT = 5.0


class DaskMissingError(PluginError):
    """``dask.distributed`` is not installed; the message names the ``dask`` extra."""

    extra = "dask"


class SchedulerUnreachable(PluginError):
    """The Dask scheduler did not answer within the connect timeout, or has no workers;
    ``report``: the bake's report of what was done, when it went away mid-bake."""

    report: Any = None


@dataclass(frozen=True)
class LostWorker:
    """A worker that left the cluster unexpectedly during the bake (killed, crashed, cut off);
    ``chunks`` are the indices of the chunks it was running, which the scheduler retries on
    the other workers."""

    worker: str
    chunks: tuple[int, ...]


class WorkerDied(RuntimeError):
    """A worker process exited while baking a chunk (a crash in the driver's compiler, or killed)."""


def import_distributed() -> Any:
    """The ``distributed`` module, or :class:`DaskMissingError` with the install line."""
    try:
        import distributed
    except ImportError as exc:
        raise DaskMissingError(f"{DASK_INSTALL_HINT} (import failed: {exc})") from None
    return distributed


class InlineRunner:
    """Bake in this process, on its own device (``--jobs 1``): no start-up cost at all. A
    compile outliving a job's ``compile_timeout`` is left running on its thread and its
    variant fails (see the worker module)."""

    workers = 1
    label = "this process"
    deadlines = True  # jobs may carry a compile_timeout
    local_gpu = True  # its jobs compile on this machine's adapter

    def __enter__(self) -> "InlineRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def events(self, final: bool = False) -> list[LostWorker]:
        return []

    def run(self, jobs: Sequence[ChunkJob]) -> Yielded:
        for job in jobs:
            try:
                yield job, bake_chunk(job)
            except Exception as exc:  # bake_chunk catches per variant; this is a bug of ours
                yield job, exc


def _exit_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """End this worker when the bake client that started it (``parent``, its pid) is gone
    (killed by a supervisor, an IDE or the OOM killer): the pool's pipes do not tell a worker
    blocked writing a result or waiting on the queue's lock, and such workers lived on for good,
    130-200 MB each. The client's pid comes from the client: a worker still importing when the
    client died read its new parent (init) as the one to watch, and lived on (seen on a loaded
    machine: the test that kills a bake failed)."""
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="engine_plugin bake: parent watch", daemon=True).start()


def _warm_worker(parent: int, stuck_dir: str | None = None) -> None:
    _exit_with_parent(parent)
    _worker._STUCK_DIR[0] = stuck_dir  # where a compile outliving its deadline is noted
    # Ctrl-C reaches the whole process group: the client handles it (drops the queued chunks
    # and ends the workers, see ProcessPoolRunner.__exit__), so a worker ignores it instead of
    # dying mid-chunk with a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Import the lowering and the runtime while the pool starts, not inside the first chunk.
    from ..runtime import compile as _compile  # noqa: F401


@contextlib.contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """Processes started inside inherit an ignored SIGINT (Python leaves an ignored SIGINT
    alone at start-up); the client's own handler is back afterwards."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to arrange
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


_NOTES_PREFIX = "engine_plugin-bake-"  # a pool's folder for its workers' stuck notes
_MAKING_PREFIX = "engine_plugin-bakeinit-"  # a note folder being made (locked, then renamed); swept too
_NOTES_LOCK = ".client"  # held (flock) by the live bake client: a folder whose lock is free is an orphan


def _remove_orphaned_note_dirs() -> None:
    """Remove the note folders of bake clients that are gone (killed: their ``__exit__`` never
    ran, and the folders piled up in the temporary folder, review helper 141). A live client
    holds its folder's lock; a pid would not tell (another PID namespace sharing the temporary
    folder, review helper 142)."""
    base = glob.escape(tempfile.gettempdir())
    for path in glob.glob(os.path.join(base, _NOTES_PREFIX + "*")) + glob.glob(os.path.join(base, _MAKING_PREFIX + "*")):
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(path, _NOTES_LOCK), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue  # not ours, not a folder of this kind, or made by a client just starting
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: a live bake's
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)


def _note_dir() -> tuple[str, int]:
    """A new note folder and the fd of its held lock (see :func:`_remove_orphaned_note_dirs`):
    made and locked under another name, then renamed into the swept ones, so no sweep sees it
    unlocked (another bake starting at that moment removed it, review helper 143)."""
    making = tempfile.mkdtemp(prefix=_MAKING_PREFIX)
    fd = os.open(os.path.join(making, _NOTES_LOCK), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    folder, name = os.path.split(making)
    path = os.path.join(folder, _NOTES_PREFIX + name[len(_MAKING_PREFIX) :])
    os.rename(making, path)
    return path, fd


# Variants a pool process compiles, about, before its pool is replaced: every compile leaves
# native objects behind in wgpu-native and the Vulkan driver (~0.28 MiB a variant on lavapipe,
# never freed, the Python heap flat), and a 65,536-variant bake took each process to 9.6 GB
# (review helper 241). 2048 bounds that to ~0.6 GiB a process; a new pool costs a second or two.
DEFAULT_WORKER_VARIANTS = 2048
WORKER_VARIANTS_ENV = "ENGINE_PLUGIN_BAKE_WORKER_VARIANTS"  # overrides it (tests, tuning)


def _worker_variants() -> int:
    text = os.environ.get(WORKER_VARIANTS_ENV, "").strip()
    try:
        return max(1, int(text)) if text else DEFAULT_WORKER_VARIANTS
    except ValueError:
        raise PluginError(f"{WORKER_VARIANTS_ENV}={text!r} is not a whole number of variants") from None


class ProcessPoolRunner:
    """A local pool of ``n`` worker processes, started with ``spawn``: wgpu (and the Vulkan
    driver under it) is not fork-safe, and each worker makes its own device.

    A pool compiles at most ``worker_variants`` x ``n`` variants (whole chunks; about
    ``worker_variants`` a process), then is shut down, once its chunks are done, and a new one
    takes the rest: a process's memory grows with every variant it compiles and is only given
    back when it ends (review helper 241). ``max_tasks_per_child`` would do it without the
    wait, but Python 3.11-3.13's pool then hangs with chunks queued (CPython gh-115634)."""

    deadlines = True  # jobs may carry a compile_timeout: a stuck worker notes its variant and ends
    local_gpu = True  # its jobs compile on this machine's adapter

    def __init__(self, n: int, worker_variants: int | None = None):
        if n < 1:
            raise ValueError(f"a process pool needs at least one worker, not {n}")
        self.workers = n
        self.label = f"{n} local processes"
        self.worker_variants = worker_variants if worker_variants is not None else _worker_variants()
        if self.worker_variants < 1:
            raise ValueError(f"a pool process compiles at least one variant, not {self.worker_variants}")
        self._served = 0  # variants submitted to the current pool
        self._pool: ProcessPoolExecutor | None = None
        self._lost: list[LostWorker] = []
        self._stuck_dir: str | None = None
        self._stuck_lock = -1  # the fd holding the note folder's lock

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_warm_worker, initargs=(os.getpid(), self._stuck_dir)
        )

    def __enter__(self) -> "ProcessPoolRunner":
        _remove_orphaned_note_dirs()
        self._stuck_dir, self._stuck_lock = _note_dir()
        self._pool = self._start()
        return self

    def _take_stuck(self) -> dict[int, set[str]]:
        """The variants whose compile outlived their deadline, noted by the workers that ended
        for it: chunk index -> keys (the notes are consumed)."""
        found: dict[int, set[str]] = {}
        if self._stuck_dir is None:
            return found
        for path in _worker.stuck_notes(self._stuck_dir):
            try:
                with open(path) as f:
                    index, key = f.read().split()[:2]
                found.setdefault(int(index), set()).add(key)
            except (OSError, ValueError):
                pass  # a note cut short: that worker counts as one that died
            with contextlib.suppress(OSError):
                os.unlink(path)
        return found

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._pool is not None:
            if exc_type is not None:
                # Interrupted (a Ctrl-C, an error): what the running chunks bake is never
                # written, so they are not waited for; a compile that never ends (lavapipe and a
                # huge var<private> array) held Ctrl-C off for good (review helper 128). The
                # queued chunks are dropped, the workers ended. ``_processes`` is CPython's
                # (since 3.2); without it the running chunks are waited for, as before.
                for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                    with contextlib.suppress(Exception):
                        process.terminate()
            self._pool.shutdown(wait=True, cancel_futures=exc_type is not None)
            self._pool = None
        if self._stuck_dir is not None:
            shutil.rmtree(self._stuck_dir, ignore_errors=True)
            os.close(self._stuck_lock)
            self._stuck_dir = None

    def events(self, final: bool = False) -> list[LostWorker]:
        """Pools a dead worker process broke since the last call, with the chunks run again."""
        out, self._lost = self._lost, []
        return out

    def _restart(self, retried: list[ChunkJob]) -> None:
        """A worker process died: the pool is broken for good. A new one takes the chunks
        that had not finished (one dead process failed every queued chunk of every asset,
        blamed on assets that did nothing wrong, and the other workers sat idle: review
        helper 123)."""
        dead = self._dead()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._start()
        self._served = 0
        if retried:
            # One event a broken pool, its chunks every unfinished one, queued ones too.
            self._lost.append(LostWorker(dead, tuple(job.index for job in retried)))

    def _dead(self) -> str:
        """The broken pool's processes that died, named ``host:pid`` as a variant's ``worker``
        names the process that baked it (a sentence stood there, in --json's lost_workers and
        the closing line: review helper 241). Those the pool ended itself (SIGTERM) are not."""
        manager = getattr(self._pool, "_executor_manager_thread", None)
        if manager is not None:
            # It ends the broken pool's other processes and reaps them all: read before it has,
            # an exit status could be missing (racing its waitpid) and nobody named.
            manager.join(5.0)
        processes = (getattr(self._pool, "_processes", None) or {}).items()
        names = [f"{socket.gethostname()}:{pid}" for pid, process in processes if process.exitcode not in (None, 0, -signal.SIGTERM)]
        return ", ".join(names) or "a local pool process"

    def _parts(self, batch: list[ChunkJob]) -> list[list[ChunkJob]]:
        """``batch`` in consecutive parts of at most one pool's quota of variants (a chunk
        larger than that alone)."""
        limit = self.worker_variants * self.workers
        parts: list[list[ChunkJob]] = [[]]
        size = 0
        for job in batch:
            if parts[-1] and size + len(job.items) > limit:
                parts.append([])
                size = 0
            parts[-1].append(job)
            size += len(job.items)
        return [part for part in parts if part]

    def _recycle(self, batch: list[ChunkJob]) -> None:
        """Replace the pool before ``batch`` when it would compile more than its quota (see the
        class docstring). Its chunks are all done: its processes end having finished them."""
        size = sum(len(job.items) for job in batch)
        if self._served and self._served + size > self.worker_variants * self.workers and self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = self._start()
            self._served = 0
        self._served += size

    def run(self, jobs: Sequence[ChunkJob]) -> Yielded:
        """Chunks in completion order. After a worker's death the unfinished chunks run again
        in a new pool; after a second death they run one at a time, so the chunk that kills
        its worker is the one that fails (a crash in the driver's compiler), not its neighbours.
        A worker that ended because a compile outlived its deadline noted the variant: that
        variant fails, the rest of its chunk runs again, and nothing else is blamed."""
        if self._pool is None:
            raise RuntimeError("ProcessPoolRunner.run outside its with-block")
        pending, breaks = list(jobs), 0
        while pending:
            batches = [pending] if breaks < 2 else [[job] for job in pending]
            batches = [part for batch in batches for part in self._parts(batch)]
            pending = []
            explained = False  # a break a stuck compile's note accounts for
            for batch in batches:
                self._recycle(batch)
                # A pool starts its processes at its first submits: they are born ignoring SIGINT,
                # so a Ctrl-C while they import (a bake's start, a pool started anew after a
                # death) prints no traceback of theirs (review helper 124). The window in which
                # this process ignores it too is that of starting them.
                head = batch[: self.workers]  # the submits that start the processes (one each)
                with _children_ignore_sigint():
                    futures = {self._pool.submit(bake_chunk, job): job for job in head}
                futures.update({self._pool.submit(bake_chunk, job): job for job in batch[len(head) :]})
                broken: list[tuple[ChunkJob, BaseException]] = []
                for fut in as_completed(futures):
                    job = futures[fut]
                    try:
                        yield job, fut.result()
                    except BrokenProcessPool as died:
                        broken.append((job, died))
                    except Exception as exc:
                        yield job, exc
                if not broken:
                    continue
                stuck = self._take_stuck()
                explained = explained or bool(stuck)
                retried: list[ChunkJob] = []
                for job, why in broken:
                    keys = stuck.get(job.index, set())
                    hung = tuple(item for item in job.items if item.key in keys) if keys else ()
                    if hung:
                        yield replace(job, items=hung), _stuck_result(job, hung)
                        rest = tuple(item for item in job.items if item.key not in keys)
                        if rest:
                            retried.append(replace(job, items=rest))
                    elif breaks >= 2 and not stuck:  # run alone, and its worker died again: this chunk kills it
                        yield (
                            job,
                            WorkerDied(
                                f"a bake worker process died running this chunk alone, after two pools had broken ({why}); its variants were not validated"
                            ),
                        )
                    else:
                        retried.append(job)
                self._restart(retried)
                pending.extend(retried)
            if pending and not explained:
                breaks += 1


def _stuck_result(job: ChunkJob, hung: tuple) -> ChunkResult:
    """The failures of the variants whose compile outlived ``job``'s deadline."""
    limit = job.compile_timeout or 0.0
    text = f"{job.wgsl_path}: {_worker._timeout_message(limit)}"
    failure = Failure("CompileError", text, text, job.wgsl_path)
    return ChunkResult(job.asset, job.index, tuple(VariantOutcome(item.key, item.spec, limit, failure=failure) for item in hung), "the local pool")


_DASK_POLL_S = 0.5  # how often a Dask bake looks at its cluster while nothing completes


class DaskRunner:
    """Chunks as Dask tasks, on the cluster at ``scheduler`` or on a ``LocalCluster`` of
    ``local_workers`` processes (one thread each) bound to loopback.

    Workers return the lowered variants; the client writes the cache (package docstring).
    """

    def __init__(self, scheduler: str | None = None, local_workers: int | None = None, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT):
        if (scheduler is None) == (local_workers is None):
            raise ValueError("DaskRunner takes a scheduler address or local_workers, not both or neither")
        if local_workers is not None and local_workers < 1:
            raise ValueError(f"--dask-local needs at least one worker, not {local_workers}")
        self.distributed = import_distributed()
        self.scheduler = scheduler
        self.local_workers = local_workers
        self.connect_timeout = connect_timeout
        self.workers = local_workers or 1
        self.label = f"Dask LocalCluster of {local_workers} processes" if local_workers else f"Dask cluster at {scheduler}"
        self.cluster: Any = None
        self.client: Any = None
        self._index_of: dict[str, int] = {}  # task key -> chunk index
        self._ended: set[int] = set()  # chunks handed back (baked or failed): not run again
        self._known_events: set[tuple[float, str]] = set()
        self._lost: set[str] = set()
        self._polled = 0.0
        self._no_workers_since: float | None = None  # since when the cluster has had no worker

    def __enter__(self) -> "DaskRunner":
        d = self.distributed
        # distributed logs a scheduler lost mid-bake itself, with a traceback, while the client
        # gives up (until it is closed): the one line SchedulerUnreachable raises says it.
        client_log = logging.getLogger("distributed.client")
        self._client_log_level = client_log.level
        client_log.setLevel(logging.CRITICAL)
        try:
            if self.local_workers is not None:
                with _children_ignore_sigint():
                    self.cluster = self._local_cluster(d)
                self.client = d.Client(self.cluster, timeout=self.connect_timeout)
            else:
                self.client = self._connect(d)
            info = self.client.scheduler_info()
            threads = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
            self.workers = max(1, threads)
            if self.scheduler is not None:
                self.label = f"Dask cluster at {self.scheduler} ({len(info.get('workers', {}))} workers, {self.workers} threads)"
            # Removals from before this bake are not ours to report.
            self._known_events = {key for key, _ in self._removals()}
        except BaseException:
            self.__exit__(None)
            raise
        return self

    def _connect(self, d: Any) -> Any:
        """A client of the scheduler, within ``connect_timeout`` or :class:`SchedulerUnreachable`."""
        t = self.connect_timeout
        # distributed logs every failed connection attempt itself; the one line below says it all.
        quiet = [logging.getLogger(name) for name in ("distributed", "distributed.client", "distributed.comm")]
        levels = [lg.level for lg in quiet]
        for lg in quiet:
            lg.setLevel(logging.CRITICAL)
        try:
            try:
                client = d.Client(self.scheduler, timeout=t)
            except ValueError as exc:  # 'localhost' (no port), 'tcp://x:y', 'foo://...': a usage error, not a bug (helper 155)
                raise SchedulerUnreachable(f"{self.scheduler!r} is not a Dask scheduler address, e.g. tcp://farm:8786 ({' '.join(str(exc).split())})") from None
            except (OSError, TimeoutError) as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise SchedulerUnreachable(
                    f"cannot reach the Dask scheduler at {self.scheduler} within {t:g} s ({reason}); is it running and reachable? "
                    "(--connect-timeout S waits longer)"
                ) from None
        finally:
            for lg, level in zip(quiet, levels):
                lg.setLevel(level)
        try:
            client.wait_for_workers(1, timeout=t)
        except (OSError, TimeoutError):
            client.close()
            raise SchedulerUnreachable(f"the Dask scheduler at {self.scheduler} has no workers (none joined within {t:g} s)") from None
        return client

    def _removals(self) -> list[tuple[tuple[float, str], dict]]:
        """The scheduler's worker-removal events: ((time, worker), message)."""
        try:
            events = self.client.get_events("all")
        except Exception:  # an old scheduler, a lost connection: nothing to report
            return []
        out = []
        for stamp, msg in events:
            if isinstance(msg, dict) and msg.get("action") == "remove-worker":
                out.append(((float(stamp), str(msg.get("worker"))), msg))
        return out

    def events(self, final: bool = False) -> list[LostWorker]:
        """Workers lost since the last call (asked of the scheduler at most twice a second,
        and always when ``final``), each with the chunks it was running."""
        if self.client is None:
            return []
        now = time.monotonic()
        if not final and now - self._polled < 0.5:
            return []
        self._polled = now
        out = []
        for key, msg in self._removals():
            worker = key[1]
            if key in self._known_events or msg.get("expected") or worker in self._lost:
                continue
            self._known_events.add(key)
            self._lost.add(worker)
            # A chunk already handed back is not run again: KilledWorker failed it when this
            # worker died (its removal was said to retry it, review helper 241).
            chunks = sorted(i for k in msg.get("processing-tasks", ()) if (i := self._index_of.get(k)) is not None and i not in self._ended)
            out.append(LostWorker(worker, tuple(chunks)))
        return out

    def _local_cluster(self, d: Any) -> Any:
        return d.LocalCluster(
            n_workers=self.local_workers,
            processes=True,
            threads_per_worker=1,
            host="127.0.0.1",  # loopback only: nothing outside this machine can reach it
            scheduler_port=0,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.client is not None:
                try:
                    self.client.close()
                finally:
                    self.client = None
            if self.cluster is not None:
                try:
                    self.cluster.close()
                finally:
                    self.cluster = None
        finally:
            logging.getLogger("distributed.client").setLevel(getattr(self, "_client_log_level", logging.NOTSET))

    def run(self, jobs: Sequence[ChunkJob]) -> Yielded:
        d = self.distributed
        token = uuid.uuid4().hex[:8]
        by_key = {}
        futures = []
        for job in jobs:
            # Readable task keys on the dashboard; the token keeps two bakes apart.
            key = f"engine-plugin-bake-{job.index}-{token}"
            fut = self.client.submit(bake_chunk, job, key=key, pure=False)
            by_key[fut.key] = job
            self._index_of[str(fut.key)] = job.index
            futures.append(fut)
        pending = set(futures)
        self._no_workers_since = None
        try:
            while pending:
                # Waited for in steps: a cluster whose last worker went away never completes
                # anything (the bake waited for good), and one whose scheduler went away
                # cancels everything (review helper 171): both are said, not waited on.
                try:
                    done, pending = d.wait(list(pending), timeout=_DASK_POLL_S, return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = set()
                except Exception as exc:  # FuturesCancelledError: the scheduler went away
                    if self._scheduler_gone(exc):
                        raise SchedulerUnreachable(self._gone_message()) from None
                    raise
                if not done:
                    self._check_cluster()
                    continue
                for fut in done:
                    job = by_key[fut.key]
                    try:
                        result: Any = fut.result()
                    except Exception as exc:  # KilledWorker, a pickling error; a lost scheduler ends the bake
                        if self._scheduler_gone(exc):
                            raise SchedulerUnreachable(self._gone_message()) from None
                        result = exc
                    fut.release()
                    self._ended.add(job.index)
                    yield job, result
        finally:
            for fut in futures:
                if not fut.done():
                    fut.cancel()

    def _gone_message(self) -> str:
        return (
            f"the Dask scheduler at {self.scheduler or 'the local cluster'} went away mid-bake; what was baked so far stays in the cache (bake again to finish)"
        )

    def _scheduler_gone(self, exc: BaseException) -> bool:
        """Whether ``exc`` (a task's) means the scheduler went away, not that the task failed."""
        if isinstance(exc, asyncio.CancelledError) or type(exc).__name__ in ("FutureCancelledError", "FuturesCancelledError"):
            return True
        return getattr(self.client, "status", "running") != "running"

    def _check_cluster(self) -> None:
        """Raise SchedulerUnreachable when the scheduler is gone, or has had no worker for
        ``connect_timeout`` seconds (nothing would ever run)."""
        if getattr(self.client, "status", "running") != "running":
            raise SchedulerUnreachable(self._gone_message())
        try:
            workers = len(self.client.scheduler_info().get("workers", {}))
        except Exception:
            raise SchedulerUnreachable(self._gone_message()) from None
        if workers:
            self._no_workers_since = None
            return
        now = time.monotonic()
        if self._no_workers_since is None:
            self._no_workers_since = now
        elif now - self._no_workers_since > self.connect_timeout:
            raise SchedulerUnreachable(
                f"the Dask cluster at {self.scheduler or 'the local cluster'} has had no worker for {self.connect_timeout:g} s (the last one went away "
                "mid-bake); what was baked so far stays in the cache (--connect-timeout S waits longer)"
            )
