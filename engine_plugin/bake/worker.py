"""The bake worker: lower and validate one chunk of variants of one asset.

:func:`bake_chunk` is a module-level function of plain, picklable data in and out, so the
same function runs in this process, in a ``spawn`` process pool, or on a Dask worker
(pickled by reference: the worker imports ``engine_plugin.bake.worker``). It never touches
the file system: the asset's texts travel in the job, and the lowered variants travel back
for the client to write (see the package docstring for why).

Each worker process validates on its own device (the process-wide default one, created on
the first chunk): wgpu devices are never shared between processes, and a forked child must
never inherit one, which is why the local pool uses the ``spawn`` start method.

A compile cannot be interrupted: it runs in the driver's native code (lavapipe compiled a huge
``var<private>`` array for minutes, and a bake waited for good). A job with a
``compile_timeout`` fails a variant whose compile outlives it. In a local pool's worker the
process then ends, after noting the variant (:func:`stuck_note`) where the client reads it:
the client fails that variant and runs the rest of the chunk in a new pool, and the stuck
compile's CPU is freed. In the bake command's own process (``--jobs 1``) the compile runs on a
thread of its own that is left behind (a daemon thread, which the interpreter's exit does not
wait for): the bake goes on and reports as usual.
"""

from __future__ import annotations

import glob
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompileError, PluginError, Span
from ..lowering import Lowered, VariantSpec, lower, parse
from ..lowering.fingerprint import CACHE_FORMAT_VERSION
from ..lowering.lower import LOWERING_VERSION

__all__ = [
    "BakeItem",
    "ChunkJob",
    "ChunkResult",
    "Failure",
    "VariantOutcome",
    "bake_chunk",
    "failure_from",
    "stuck_note",
    "stuck_notes",
    "worker_versions",
]


@dataclass(frozen=True)
class BakeItem:
    """One variant to bake: its cache key (computed by the client) and its specialisation."""

    key: str
    spec: VariantSpec


@dataclass(frozen=True)
class ChunkJob:
    """A chunk of variants of one asset, with the asset's texts (workers read no files).

    ``yaml_path``/``wgsl_path`` are the paths errors and the cache entries name, as the
    user gave them to the command; ``modules`` are the modules the body imports, as
    (name, path, text), read by the client like the asset's own files.
    """

    asset: str
    yaml_path: str
    yaml_text: str
    wgsl_path: str
    wgsl_text: str
    items: tuple[BakeItem, ...]
    validate: bool = True
    index: int = 0  # the chunk's position in the plan, for stable keys and ordering
    modules: tuple[tuple[str, str, str], ...] = ()
    compile_timeout: float | None = None  # seconds a variant's compile may take (see the module docstring)

    @property
    def module_texts(self) -> dict[str, tuple[str, str]]:
        """``{name: (path, text)}`` for :func:`engine_plugin.lowering.lower`."""
        return {name: (path, text) for name, path, text in self.modules}


@dataclass(frozen=True)
class Failure:
    """Why a variant (or a whole asset) did not bake, as plain data.

    ``rendered`` is what the user sees: ``path:line:col: message`` plus the source line and a
    caret; ``headline`` is its first line. ``kind`` is the exception class name.
    """

    kind: str
    headline: str
    rendered: str
    path: str | None = None
    line: int | None = None
    col: int | None = None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "line": self.line, "col": self.col, "message": self.headline, "rendered": self.rendered}


@dataclass(frozen=True)
class VariantOutcome:
    """One variant's result: ``lowered`` when it baked, ``failure`` when it did not."""

    key: str
    spec: VariantSpec
    seconds: float
    lowered: Lowered | None = None
    failure: Failure | None = None


@dataclass(frozen=True)
class ChunkResult:
    """A chunk's outcomes, where it ran, and the worker's format versions (checked by the client)."""

    asset: str
    index: int
    outcomes: tuple[VariantOutcome, ...]
    worker: str
    versions: tuple[int, str] = field(default=(CACHE_FORMAT_VERSION, LOWERING_VERSION))


def worker_versions() -> tuple[int, str]:
    """(cache format, lowering) versions of this build; a worker must match the client's."""
    return (CACHE_FORMAT_VERSION, LOWERING_VERSION)


def failure_from(exc: BaseException) -> Failure:
    """A :class:`Failure` for an exception: a plugin error keeps its span; anything else is
    reported as a bug of ours, with the traceback (a worker must never die of one variant)."""
    if isinstance(exc, PluginError):
        rendered = str(exc)
        return Failure(type(exc).__name__, exc.headline(), rendered, exc.path, exc.line, exc.col)
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    headline = f"engine_plugin bug, please report: baking raised {type(exc).__name__}: {exc}"
    return Failure(type(exc).__name__, headline, f"{headline}\n{tb}")


def _device() -> Any:
    # Imported here: a worker that only lowers (validate=False) never loads wgpu.
    from ..device.context import get_context

    return get_context()


def _validate(lowered: Lowered) -> None:
    from ..runtime.compile import compile_lowered

    ctx = _device()
    # Its portability warnings are the bake's to report, once, by the command's contract (a
    # worker's log went to stderr as it was: several lines, no prefix, under -q too).
    compile_lowered(lowered, label=f"bake {lowered.spec.label()}", device=ctx, warn=False)
    # A bake compiles thousands of variants it will never run: drop the pipeline (the device
    # context would otherwise keep every one). wgpu-native and the driver still keep ~0.28 MiB
    # a compile until the process ends: the local pool replaces its processes for that
    # (runners.ProcessPoolRunner, review helper 241).
    ctx.cache("compiled").pop(lowered.fingerprint, None)


_STUCK_EXIT = 70  # the exit status of a pool worker whose compile outlived its job's compile_timeout
# Where this process notes the variant whose compile outlived the deadline before it ends
# (set in a local pool's workers by their initializer; None: this is the bake's own process).
_STUCK_DIR: list[str | None] = [None]


def stuck_note(folder: str, pid: int) -> str:
    """The file a pool worker ``pid`` notes its stuck variant in (``index`` and ``key`` lines)."""
    return os.path.join(folder, f"{pid}.stuck")


def stuck_notes(folder: str) -> list[str]:
    """The notes pool workers left in ``folder`` (see :func:`stuck_note`)."""
    return glob.glob(os.path.join(glob.escape(folder), "*.stuck"))


def _timeout_message(limit: float) -> str:
    return f"compiling this variant did not finish within {limit:g} s (--compile-timeout): the driver's compiler is stuck on it"


def _validate_on_thread(job: ChunkJob, lowered: Lowered, limit: float) -> None:
    """:func:`_validate` on a thread of its own, waited for at most ``limit`` seconds (the
    waiting thread stays interruptible: Ctrl-C)."""
    failed: list[BaseException] = []

    def compile_it() -> None:
        try:
            _validate(lowered)
        except BaseException as exc:  # handed to the waiting thread
            failed.append(exc)

    thread = threading.Thread(target=compile_it, name="engine_plugin bake compile", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():  # left running (a daemon thread): see the module docstring
        raise CompileError(_timeout_message(limit), Span(job.wgsl_path))
    if failed:
        raise failed[0]


def _validate_within(job: ChunkJob, item: BakeItem, lowered: Lowered) -> None:
    """:func:`_validate` within ``job.compile_timeout`` (see the module docstring)."""
    limit = job.compile_timeout
    if limit is None:
        _validate(lowered)
        return
    if _STUCK_DIR[0] is None:  # the bake command's own process
        _validate_on_thread(job, lowered, limit)
        return
    finished = threading.Event()

    def give_up() -> None:
        if finished.is_set():
            return
        try:
            with open(stuck_note(_STUCK_DIR[0] or "", os.getpid()), "w") as f:
                f.write(f"{job.index}\n{item.key}\n")
        except OSError:
            pass  # the client then sees a worker that died, as before
        sys.stderr.write(
            f"engine-plugin bake: {job.wgsl_path} variant {item.spec.label()}: {_timeout_message(limit)}; this worker ends, the rest of its chunk bakes in a new one\n"
        )
        sys.stderr.flush()
        os._exit(_STUCK_EXIT)

    timer = threading.Timer(limit, give_up)
    timer.daemon = True
    timer.start()
    try:
        _validate(lowered)
    finally:
        finished.set()
        timer.cancel()


def bake_chunk(job: ChunkJob) -> ChunkResult:
    """Lower each variant of ``job`` and (unless ``job.validate`` is false) compile it on this
    process's device. Never raises for an asset's error: each variant's failure is returned."""
    outcomes = []
    try:
        schema = parse(job.yaml_text, job.yaml_path)
    except Exception as exc:  # the client parsed it already; a worker disagreeing is reported
        failure = failure_from(exc)
        outcomes = [VariantOutcome(item.key, item.spec, 0.0, failure=failure) for item in job.items]
        return ChunkResult(job.asset, job.index, tuple(outcomes), _worker_name())
    if job.validate:
        try:
            _device()  # made once per worker process; not part of any variant's time
        except Exception as exc:  # no adapter: every variant of the chunk fails with why
            failure = failure_from(exc)
            return ChunkResult(job.asset, job.index, tuple(VariantOutcome(i.key, i.spec, 0.0, failure=failure) for i in job.items), _worker_name())
    for item in job.items:
        t0 = time.perf_counter()
        try:
            lowered = lower(schema, job.wgsl_text, item.spec, wgsl_path=job.wgsl_path, modules=job.module_texts)
            if job.validate:
                _validate_within(job, item, lowered)
        except Exception as exc:
            outcomes.append(VariantOutcome(item.key, item.spec, time.perf_counter() - t0, failure=failure_from(exc)))
            continue
        outcomes.append(VariantOutcome(item.key, item.spec, time.perf_counter() - t0, lowered=lowered))
    return ChunkResult(job.asset, job.index, tuple(outcomes), _worker_name())


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
