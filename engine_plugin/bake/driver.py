"""The bake itself: plan, skip what the cache holds, run the rest, write entries, report."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..cache import VariantCache, decode_entry
from ..cache.entry import BadEntry
from ..cache.remote import RemoteCache
from ..cache.store import read_entry_file
from ..errors import CacheError, PluginError, Span
from ..files import shown_path
from ..lowering import VariantSpec
from .plan import AssetPlan, chunk_jobs, plan_assets
from .progress import NoProgress
from .report import BakeInterrupted, BakeReport
from .runners import InlineRunner, SchedulerUnreachable
from .verify import check_chunk
from .worker import BakeItem, ChunkJob, ChunkResult, Failure, VariantOutcome, failure_from, worker_versions

__all__ = ["bake"]


def _chunk_failure(job: ChunkJob, exc: BaseException) -> Failure:
    if isinstance(exc, PluginError):
        return failure_from(exc)
    # A worker that died, a lost Dask worker, a result that did not travel: the runner's
    # trouble, not the asset's; name the asset so the user knows what was not validated.
    text = f"{job.asset}: the bake worker failed: {type(exc).__name__}: {exc}"
    return Failure(type(exc).__name__, text, text, job.asset)


# Entries are written on a few threads: each write is fsync-bound (~1 ms) and releases the
# GIL, so writing overlaps the compiles (inline) and keeps up with many workers (pool, Dask).
WRITER_THREADS = 4


class _Bake:
    """Takes chunk results (on the calling thread), writes entries (on writer threads) and
    keeps the report; every report and progress update happens on the calling thread."""

    def __init__(self, cache: VariantCache, progress: NoProgress, report: BakeReport, remote: RemoteCache | None = None, validated: bool = True):
        self.cache = cache
        self.validated = validated  # the variants this bake writes were compiled on a device
        self.remote = remote
        self.progress = progress
        self.report = report
        self.done = 0
        self.baked = 0
        self.failed = 0
        self._seen: Counter[str] = Counter()
        self._first: dict[str, Failure] = {}
        self._warned: set[str] = set()  # portability warnings said
        self._writers: ThreadPoolExecutor | None = None
        self._writes: list[tuple[Future, str, VariantOutcome, str]] = []

    def __enter__(self) -> "_Bake":
        self._writers = ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="bake-write")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._writers is not None:
            self.drain(wait=True)
            self._writers.shutdown(wait=True)
            self._writers = None

    def announce(self, asset: str, spec: VariantSpec | None, failure: Failure) -> None:
        """Report a failure the first time its text is seen (one line; the source line and
        caret with -v); repeats are counted (one broken line usually breaks every variant)."""
        self._seen[failure.rendered] += 1
        if self._seen[failure.rendered] == 1:
            where = f" (in {shown_path(asset)}" + (f" variant {spec.label()})" if spec is not None else ")")
            detail = failure.rendered[len(failure.headline) :].lstrip("\n") if failure.rendered.startswith(failure.headline) else failure.rendered
            self.progress.failure(failure.headline + where, detail)
            self._first[failure.rendered] = failure

    def repeats(self) -> None:
        for rendered, n in self._seen.items():
            if n > 1:
                first = self._first[rendered]
                # Named by its place (path:line:col) when it has one, else by its whole first
                # line: the text before a first ": " cut a message without a place mid-sentence
                # (review helper 190).
                headline = first.headline
                prefix = headline.split(": ", 1)[0] if first.path is not None and ": " in headline else headline
                self.progress.failure(f"{prefix}: the same error in {n - 1} more variant(s)", "")

    def lost(self, lost: list[Any], jobs: list[ChunkJob]) -> None:
        """Record workers the runner lost and the chunks retried elsewhere; say so at once."""
        by_index = {job.index: job for job in jobs}
        for event in lost:
            variants = sum(len(by_index[i].items) for i in event.chunks if i in by_index)
            self.report.lose_worker(event.worker, event.chunks, variants)
            self.progress.lost_worker(event.worker, len(event.chunks), variants)

    def _failed(self, asset: str, out: VariantOutcome, failure: Failure, worker: str) -> None:
        self.report.fail(asset, out.spec, out.key, failure, out.seconds, worker)
        self.announce(asset, out.spec, failure)
        self.failed += 1
        self.done += 1

    def warn(self, asset: str, out: VariantOutcome) -> None:
        """Say a baked variant's portability issues (beyond WebGPU's default limits), each
        text once: one line with the command's prefix, the source line and caret with -v."""
        if out.lowered is None or not self.progress.show_warnings:
            return
        from ..lowering.portability import portability_issues

        for issue in portability_issues(out.lowered):
            text = str(issue)
            if text in self._warned:
                continue
            self._warned.add(text)
            self.progress.warning(f"{issue.headline()} (in {shown_path(asset)} variant {out.spec.label()})", issue.span.caret())

    def _written(self, asset: str, out: VariantOutcome, ok: bool, worker: str) -> None:
        if ok:
            self.warn(asset, out)
            self.report.add(asset, out.key, out.spec, "baked", out.seconds, worker)
            self.baked += 1
            self.done += 1
            return
        path = self.cache.path(out.key)
        why = self.cache.write_error(out.key) or (f"no local cache key: {self.cache.keyless}" if self.cache.keyless else "disk full or read-only?")
        text = f"{path}: cannot write the cache entry ({why})"
        self._failed(asset, out, Failure("CacheError", text, text, path), worker)

    def drain(self, wait: bool = False) -> None:
        """Account for the finished writes (all of them with ``wait``), each once: a write
        leaves the list as it is counted, the two under :func:`_interrupts_held` (a Ctrl-C or
        SIGTERM landing between them is raised once they are done). The list was replaced only
        after the loop: one landing mid-loop left the writes counted so far in it, and
        ``__exit__``'s drain counted them again (totals.baked 10 with 8 entries, review helper
        241). The wait for a write's result stays interruptible, the write still listed (review
        helper 243: held, a Ctrl-C waited for every outstanding write)."""
        still: list = []
        try:
            while self._writes:
                fut, asset, out, worker = self._writes[0]
                if not (wait or fut.done()):
                    with _interrupts_held():
                        still.append(self._writes.pop(0))
                    continue
                try:
                    ok = bool(fut.result())
                except Exception:  # put() logs and answers False; anything else is still a failed write
                    ok = False
                with _interrupts_held():
                    self._writes.pop(0)
                    self._written(asset, out, ok, worker)
        finally:
            self._writes[:0] = still
        self.progress.advance(self.done, self.baked, self.failed)

    def _write(self, key: str, lowered: Any) -> bool:
        """Both tiers: the local entry (its success is the variant's), then the remote one (a
        server that is down is counted in the remote stats, not a failed variant). The remote
        write never replaces a value there (SET NX): only ``--remote-verify`` and ``cache gc
        --remote`` replace or remove one (review helper 232)."""
        ok = self.cache.put(key, lowered, validated=self.validated)
        if ok and self.remote is not None:
            self.remote.put(key, lowered, self.validated)
        return ok

    def take(self, job: ChunkJob, result: ChunkResult | BaseException) -> None:
        if isinstance(result, ChunkResult) and result.versions != worker_versions():
            fmt, lowering = result.versions
            result = PluginError(
                f"worker {result.worker} runs an engine_plugin with cache format {fmt}, lowering version {lowering}; "
                f"this client has {worker_versions()[0]}, {worker_versions()[1]}: install the same build on every worker"
            )
        if not isinstance(result, ChunkResult):
            failure = _chunk_failure(job, result)
            for item in job.items:
                self._failed(job.asset, VariantOutcome(item.key, item.spec, 0.0), failure, "")
        else:
            # Nothing a worker sends is written unchecked: requested keys only, and a lowering
            # equal to this client's own (see verify.py); the client's lowering is what is written.
            for checked in check_chunk(job, result):
                out = checked.outcome
                if checked.lowered is None:
                    self._failed(job.asset, out, checked.failure or _no_result(out), result.worker)
                elif self._writers is None:
                    self._written(job.asset, out, self._write(out.key, checked.lowered), result.worker)
                else:
                    fut = self._writers.submit(self._write, out.key, checked.lowered)
                    self._writes.append((fut, job.asset, out, result.worker))
        self.drain()


def _unreadable_said(store: VariantCache, todo: list[tuple[AssetPlan, list[BakeItem]]], shown: int = 3) -> str:
    """``, N of them with an entry that cannot be read (NAME: why, ...)`` for the variants of
    ``todo`` whose entry file exists but cannot be read now, else ''. A read-only cache said
    only "need baking" of an entry it holds (review helper 228: mode 000, EACCES)."""
    found = [(key, why) for key in dict.fromkeys(item.key for _, items in todo for item in items) if (why := store.unreadable_why(key)) is not None]
    if not found:
        return ""
    named = ", ".join(f"{os.path.basename(store.path(key))}: {why}" for key, why in found[:shown]) + (", ..." if len(found) > shown else "")
    return f", {len(found)} of them with an entry that exists but cannot be read ({named})"


def _sync_remote(store: VariantCache, remote: RemoteCache, keys: list[str], verify: bool = False) -> dict[str, Any]:
    """Upload the entries of ``keys`` (this bake's, in the local cache, baked now or before)
    the tier lacks: writes refused during the bake (an outage, a full server) go up here.
    ``verify`` (``--remote-verify``) also reads what the tier holds for them and replaces what
    a client would refuse (a forgery that decodes, one not signed under the studio's secret:
    every client refused it, and gc and plain bakes kept it). Answers the remote part of the
    report: what was uploaded and replaced, and the tier's counters."""
    uploaded = replaced = 0
    there = remote.existing(keys) if keys else set()
    compared = False
    if there is not None:
        # Only what a client would accept goes up: a regular entry file (read without following
        # a link or opening a FIFO) that decodes under its key. Anything else under an entry's
        # name (another user of a shared cache folder swapped it) stays here (review helper 167).
        local: dict[str, bytes] = {}
        mine = {}
        for key in keys:
            try:
                data = read_entry_file(store.path(key))
                decoded = decode_entry(key, data)
            except (OSError, BadEntry):
                continue  # evicted or replaced meanwhile: the next bake uploads it
            local[key], mine[key] = data, decoded
        # The missing first: absent, empty or of another Redis type, none of them an entry.
        uploaded += remote.put_entries([(k, v) for k, v in local.items() if k not in there], replace=True)
        if verify and remote.available:
            other = remote.differing({k: v for k, v in mine.items() if k in there})
            compared = other is not None
            if other:
                written = remote.put_entries([(k, local[k]) for k in sorted(other)], replace=True)
                uploaded += written
                replaced += written
        elif there and remote.available:
            # A routine bake replaces nothing (a stale secret's bake replaced the farm's good
            # values, review helper 232): values under another secret are said, with the fix.
            remote.look_for_other_secret(k for k in keys if k in there)
    remote.publish()
    st = remote.stats()
    out = {**st.as_dict(), "uploaded": uploaded, "replaced": replaced, "reachable": there is not None and remote.available}
    if verify:
        out["compared"] = compared
    return out


def _no_result(out: VariantOutcome) -> Failure:
    text = f"engine_plugin bug, please report: the worker answered neither an entry nor a failure for {out.spec.label()}"
    return Failure("PluginError", text, text)


# [depth, owed]: inside _interrupts_held (depth > 0) the bake's signal handler notes a Ctrl-C
# or SIGTERM as owed instead of raising it; the block raises it as it ends.
_HOLD: list = [0, False]


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """A Ctrl-C or SIGTERM the bake's handler takes inside is raised when the block is over,
    not in it: a KeyboardInterrupt raised between a write's counting and its leaving the
    list of writes counted it twice (review helper 241). The main thread's only: signals
    reach no other."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _HOLD[0] += 1
    try:
        yield
    finally:
        _HOLD[0] -= 1
        if not _HOLD[0] and _HOLD[1]:
            _HOLD[1] = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def _interrupt_flag() -> Iterator[list]:
    """A Ctrl-C during the bake is noted as well as raised: Python raises it wherever the main
    thread is, and a KeyboardInterrupt raised inside a gc callback (distributed installs one)
    is printed as "ignored" and lost, so a Dask bake ran on to its end and exited 0 (review
    helper 120). The loop looks at the note after each chunk. The flag is truthy once noted
    and holds the signals noted. SIGTERM (how a CI job or a farm stops a bake) does the same
    where nothing else handles it: it killed the bake with no report (review helper 186)."""
    noted: list = []
    if threading.current_thread() is not threading.main_thread():
        yield noted  # signals reach the main thread only: its business
        return

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)
        if _HOLD[0]:  # raised as the held block ends (see _interrupts_held)
            _HOLD[1] = True
            return
        raise KeyboardInterrupt

    replaced = {}
    for signum, ours_to_take in ((signal.SIGINT, signal.default_int_handler), (getattr(signal, "SIGTERM", None), signal.SIG_DFL)):
        if signum is not None and signal.getsignal(signum) is ours_to_take:  # an embedding program's own handler: its business
            replaced[signum] = signal.signal(signum, note)
    try:
        yield noted
    finally:
        for signum, previous in replaced.items():
            signal.signal(signum, previous)


def bake(
    paths: Iterable[str],
    cache: VariantCache | str,
    *,
    runner: Any = None,
    usage: Mapping[str, list[VariantSpec]] | None = None,
    progress: NoProgress | None = None,
    validate: bool = True,
    force: bool = False,
    remote: RemoteCache | None = None,
    root: str | None = None,
    modules: Sequence[str] = (),
    remote_verify: bool = False,
    compile_timeout: float | None = None,
) -> BakeReport:
    """Lower and validate every variant of the assets under ``paths`` into ``cache``.

    Args:
        paths: asset folders or folders of assets.
        cache: the variant cache (or its folder).
        runner: an :class:`InlineRunner` (default), ``ProcessPoolRunner`` or ``DaskRunner``;
            entered only when something needs baking, so a fully baked cache starts nothing.
        usage: a usage log (:func:`engine_plugin.cache.read_usage`): bake only what it records.
        progress: where progress and failures go (default: failures to stderr only).
        validate: compile each variant on a device (the point of a bake); False only lowers.
        force: rebake variants the cache already holds.
        remote: the shared remote tier: every baked entry is written there too, and entries
            the local cache already held are uploaded when the server lacks them.
        remote_verify: also read what the tier holds for this bake's variants and replace
            what a client would refuse (reads every value: an occasional repair, not every bake).
        root: the asset root of every path (``modules/`` folders are searched up to it, files
            stay inside it); default: each path given (for one asset, the folder holding it).
        modules: module folders searched after those ``modules/`` folders, as a game's
            ``AssetLibrary(modules=[...])`` searches them (they may lie outside the root).
        compile_timeout: seconds a variant's compile may take on a local runner, past which
            it fails (a compile cannot be interrupted: a pool worker stuck in one ends, the
            :class:`InlineRunner` leaves it running on its thread); None: no limit. Runners
            without ``deadlines`` (Dask: the workers are the cluster's) take none.
    Returns:
        The :class:`BakeReport`; ``report.ok`` is false when anything failed.
    Raises:
        AssetError: a path holds no asset at all.
        NoAdapterError: variants to compile on a local runner, and no adapter to compile on.
        CacheError: variants to bake into a cache folder that cannot be written.
        BakeInterrupted: a Ctrl-C or SIGTERM; its ``report`` holds what was done by then.
    """
    t0 = time.perf_counter()
    store = cache if isinstance(cache, VariantCache) else VariantCache(cache, warn_writes=False)  # each failed write said per variant
    progress = progress or NoProgress()
    runner = runner or InlineRunner()
    report = BakeReport(store.folder)
    state = _Bake(store, progress, report, remote, validate)
    skipped: list[str] = []
    plans: list[AssetPlan] = []
    unusable_mark = store.unusable_mark()
    unusable: frozenset[str] = frozenset()
    interrupted: list = []
    planned: dict[str, str] = {}  # key -> the folder whose variant bakes it
    twins: list[tuple[AssetPlan, BakeItem]] = []  # variants another asset of this bake shares
    try:
        # A Ctrl-C or SIGTERM from the planning on (reading the assets, looking up the cache)
        # ends in a report too; one swallowed anywhere from the runner's start to its shutdown
        # (a cluster closing runs gc callbacks too) is acted on after each chunk and once it is over.
        with _interrupt_flag() as interrupted:
            plans, notes = plan_assets(paths, usage, root, modules)
            report.notes.extend(notes)
            todo = []
            for plan in plans:
                report.asset(plan.folder)
                report.planned += len(plan.items)
                if plan.error is not None:
                    report.fail(plan.folder, None, None, plan.error)
                    state.announce(plan.folder, None, plan.error)
                    continue
                pending = []
                for item in plan.items:
                    # Keys are content hashes: two copies of one asset share their variants, which
                    # bake once. A valid entry is skipped; get() decodes it (tens of microseconds),
                    # so a corrupt one is removed, counted and baked again rather than skipped.
                    if item.key in planned:
                        if planned[item.key] != plan.folder:
                            twins.append((plan, item))  # as its twin ends (see _twin_outcomes)
                        else:
                            report.add(plan.folder, item.key, item.spec, "skipped")
                        continue
                    planned[item.key] = plan.folder
                    if not force and _cached(store, plan, item, validate):
                        report.add(plan.folder, item.key, item.spec, "skipped")
                        skipped.append(item.key)
                    else:
                        pending.append(item)
                if pending:
                    todo.append((plan, pending))
            unusable = store.unusable_since(unusable_mark)  # baked again below: replaced once written
            total = sum(len(items) for _, items in todo)
            if total:
                if store.read_only:
                    # Said once, before anything compiles: every variant would fail its write (a
                    # read-only mount compiled them all and failed each one, review helper 186).
                    raise CacheError(
                        f"cannot write the variant cache folder (read-only): {total} variant(s) need baking{_unreadable_said(store, todo)}; "
                        "name a folder the bake may write",
                        Span(store.folder),
                    )
                if validate and getattr(runner, "local_gpu", False):
                    from ..device.context import require_adapter

                    require_adapter()  # none: one error (exit 2), not a failure per variant (review helper 190)
                t_start = time.perf_counter()
                with runner:
                    report.startup_s = time.perf_counter() - t_start
                    report.runner, report.workers = runner.label, runner.workers
                    jobs = chunk_jobs(todo, runner.workers, validate, compile_timeout if getattr(runner, "deadlines", False) else None)
                    progress.start(total, runner.label)
                    try:
                        with state:
                            events = getattr(runner, "events", None)
                            for job, result in runner.run(jobs):
                                if interrupted:
                                    raise KeyboardInterrupt  # a Ctrl-C that landed where it was swallowed
                                state.take(job, result)
                                if events is not None:
                                    state.lost(events(), jobs)
                            if events is not None:
                                state.lost(events(final=True), jobs)
                    finally:
                        progress.stop()
            if interrupted:
                raise KeyboardInterrupt
    except (KeyboardInterrupt, SchedulerUnreachable) as exc:
        # Ended early (Ctrl-C, the cluster gone mid-bake, review helper 173): what was done by
        # then is reported, marked interrupted (a CI job's --json says so); entries are whole.
        report.interrupted = True
        _twin_outcomes(state, twins, planned)  # a copy of what was done (or cached) by then
        report.corrupt_replaced = _replaced(report, unusable)
        if isinstance(exc, SchedulerUnreachable):
            report.notes.append(exc.message)
        _plan_order(report, plans)
        report.wall_s = time.perf_counter() - t0
        if isinstance(exc, KeyboardInterrupt):
            raise BakeInterrupted(report, interrupted[-1] if interrupted else signal.SIGINT) from None
        exc.report = report
        raise
    _twin_outcomes(state, twins, planned)
    state.repeats()
    if remote is not None:
        # Every entry of this bake the tier lacks goes up now, the ones baked in this run too:
        # a write refused during an outage mid-bake was otherwise missing from the tier with
        # nothing said (review helper 123).
        baked = [v.key for v in report.variants if v.status == "baked"]
        report.remote = _sync_remote(store, remote, list(dict.fromkeys(skipped + baked)), remote_verify)
    report.corrupt_replaced = _replaced(report, unusable)
    for plan in plans:
        if plan.changed_since_read():  # it exited 0 with the old text baked, nothing said (review helper 186)
            report.notes.append(f"{shown_path(plan.folder)} changed while it was baked: the cache holds it as it was read at the start; bake again")
            report.loud_notes.append(report.notes[-1])
    _plan_order(report, plans)
    report.wall_s = time.perf_counter() - t0
    return report


def _twin_outcomes(state: _Bake, twins: list[tuple[AssetPlan, BakeItem]], planned: dict[str, str]) -> None:
    """Each variant another asset shares (the same texts: the same key, baked once) ends as
    that asset's did: skipped when it baked or was cached, failed when it failed, with the
    error at this asset's own files. A broken copy was "skipped" before, named nowhere (not
    on stderr, in --json or in the annotations: review helper 195)."""
    report = state.report
    status = {(v.asset, v.key): v.status for v in report.variants}
    failures = {(f.asset, f.key): f.failure for f in report.failures if f.key is not None}
    for plan, item in twins:
        first = planned[item.key]
        failure = failures.get((first, item.key))
        if status.get((first, item.key)) == "failed" and failure is not None:
            mine = _moved(failure, first, plan.folder)
            report.fail(plan.folder, item.spec, item.key, mine)
            state.announce(plan.folder, item.spec, mine)
            state.failed += 1
        elif (first, item.key) in status:
            report.add(plan.folder, item.key, item.spec, "skipped")


def _moved(failure: Failure, folder: str, to: str) -> Failure:
    """``failure`` of an asset in ``folder`` as the same error in its copy ``to`` (a shared
    module's path stays: it is the same file). One pass, each path whole: replacing the
    spellings one after another replaced a name twice (``a.computeShader`` into
    ``aa.computeShader``, then its ``a.computeShader`` again), and a path matched inside a
    longer one (``assets/k`` inside ``backup/assets/k``: review helper 198)."""
    swaps = {folder: to, shown_path(folder): shown_path(to)}
    pattern = re.compile(r"(?<![\w./\\-])(" + "|".join(re.escape(k) for k in sorted(swaps, key=len, reverse=True)) + r")(?![\w.-])")

    def swap(text: str) -> str:
        return pattern.sub(lambda m: swaps[m.group(1)], text)

    path = swap(failure.path) if failure.path is not None else None
    return dataclasses.replace(failure, headline=swap(failure.headline), rendered=swap(failure.rendered), path=path)


def _replaced(report: BakeReport, unusable: frozenset[str]) -> int:
    """How many of the ``unusable`` entries this bake wrote anew (one it could not write, or
    remove, is a failed variant, not a replaced entry)."""
    return sum(1 for v in report.variants if v.status == "baked" and v.key in unusable)


def _plan_order(report: BakeReport, plans: list[AssetPlan]) -> None:
    """Results arrive in completion order; the report lists variants in plan order."""
    order = {(plan.folder, item.key): i for i, (plan, item) in enumerate((p, it) for p in plans for it in p.items)}
    report.variants.sort(key=lambda v: order.get((v.asset, v.key), len(order)))


def _cached(store: Any, plan: AssetPlan, item: BakeItem, validated: bool) -> bool:
    """Whether the cache holds a usable entry for ``item``: it decodes (get() removes and
    counts a corrupt one), says it was lowered from this asset's texts and this spec, and
    (``validated``, a validating bake) was compiled on a device by a bake. An entry filed
    under another variant's key is baked again, which overwrites it, rather than skipped and
    served; so is one a game or a reload lowered and never compiled (it may not compile: a
    bake that skipped it would pass a broken asset)."""
    if plan.schema is None or plan.source is None:
        return store.get(item.key) is not None
    derived = (plan.schema.text, plan.source.wgsl_text, item.spec, tuple(m.text for m in plan.source.modules))
    return store.get_lowered_from(item.key, derived, plan.folder, validated=validated)[0] is not None
