"""The bake driver in this process: skips by content hash, rebakes corrupt entries, survives
workers that die or disagree; with runners faked at their boundary where a real one cannot
be made to fail on purpose."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from bake_support import BROKEN_WGSL, BROKEN_YAML, SAMPLE_VARIANTS, copy_samples, write_asset

from engine_plugin.bake import BakeReport, ChunkResult, InlineRunner, bake
from engine_plugin.bake.progress import NoProgress
from engine_plugin.bake.runners import WorkerDied
from engine_plugin.bake.worker import bake_chunk
from engine_plugin.cache import VariantCache

pytestmark = pytest.mark.gpu


class Recorder(NoProgress):
    """Progress that keeps what it was told."""

    def __init__(self):
        super().__init__()
        self.messages: list[str] = []
        self.started: list[tuple[int, str]] = []
        self.last = None

    def start(self, total, label):
        self.started.append((total, label))

    def advance(self, done, baked, failed):
        self.last = (done, baked, failed)

    def message(self, text):
        self.messages.append(text)


class FakeRunner:
    """A runner that answers each chunk through ``answer(job)`` (the runner protocol)."""

    workers = 2
    label = "fake runner"

    def __init__(self, answer):
        self.answer = answer
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        pass

    def run(self, jobs):
        for job in jobs:
            yield job, self.answer(job)


def test_a_fully_baked_cache_enters_no_runner(tmp_path, gpu):
    root = copy_samples(str(tmp_path / "assets"))
    cache = VariantCache(str(tmp_path / "cache"))
    first = bake([root], cache, runner=InlineRunner())
    assert first.ok and first.totals["baked"] == SAMPLE_VARIANTS
    runner = FakeRunner(lambda job: pytest.fail("a worker ran for an already baked variant"))
    again = bake([root], cache, runner=runner)
    assert runner.entered == 0 and again.totals["skipped"] == SAMPLE_VARIANTS and again.workers == 0


def test_a_corrupt_entry_is_baked_again_not_skipped(tmp_path, gpu):
    root = copy_samples(str(tmp_path / "assets"))
    cache = VariantCache(str(tmp_path / "cache"))
    report = bake([root], cache)
    victim = report.variants[3].key
    with open(cache.path(victim), "r+b") as f:
        f.truncate(50)
    again = bake([root], VariantCache(cache.folder))
    assert again.totals["baked"] == 1 and again.totals["skipped"] == SAMPLE_VARIANTS - 1
    assert again.corrupt_replaced == 1
    assert [v.key for v in again.variants if v.status == "baked"] == [victim]
    assert VariantCache(cache.folder).get(victim) is not None


def test_a_corrupt_entry_that_cannot_be_removed_is_not_reported_replaced(tmp_path, gpu, monkeypatch, caplog):
    # A folder under an entry's name holding a subfolder its owner cannot enter: the bake said
    # "treated as a miss and replaced" and counted it in corrupt_replaced, though the entry
    # was neither removed nor written (review helper 176). The OS's refusal is simulated
    # (tests run as root, which removes it anyway).
    import shutil

    root = copy_samples(str(tmp_path / "assets"))
    cache = VariantCache(str(tmp_path / "cache"))
    report = bake([root], cache)
    victim = report.variants[3].key
    os.unlink(cache.path(victim))
    os.makedirs(os.path.join(cache.path(victim), "sub"))
    real_rmtree = shutil.rmtree

    def refused(path, ignore_errors=False, **kw):
        if os.path.abspath(path) == os.path.abspath(cache.path(victim)):
            if ignore_errors:
                return
            raise PermissionError(13, "Permission denied", os.path.join(path, "sub"))
        return real_rmtree(path, ignore_errors=ignore_errors, **kw)

    monkeypatch.setattr(shutil, "rmtree", refused)
    caplog.set_level("WARNING")
    again = bake([root], VariantCache(cache.folder))
    assert not again.ok and again.totals["failed"] == 1 and again.totals["skipped"] == SAMPLE_VARIANTS - 1
    assert again.corrupt_replaced == 0
    assert not any("replaced" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    # Once it can be removed, a bake on the same store replaces it and says so (the key was
    # remembered from the first bake, which hid it from the second: review helper 178).
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    store = VariantCache(cache.folder)
    assert bake([root], store).corrupt_replaced == 1  # the folder goes now, and the entry is written
    with open(store.path(victim), "wb") as f:
        f.write(b"not an entry")
    assert bake([root], store).corrupt_replaced == 1  # the same key again, on the same store


def test_force_bakes_everything_again(tmp_path, gpu):
    root = copy_samples(str(tmp_path / "assets"))
    cache = VariantCache(str(tmp_path / "cache"))
    bake([os.path.join(root, "particles.computeShader")], cache)
    again = bake([os.path.join(root, "particles.computeShader")], cache, force=True)
    assert again.totals["baked"] == 1 and again.totals["skipped"] == 0


def test_a_chunk_whose_worker_died_fails_its_variants_and_the_rest_bake(tmp_path, gpu):
    root = copy_samples(str(tmp_path / "assets"))
    killed = []

    def answer(job):
        if not killed and job.asset.endswith("reference.computeShader"):
            killed.append(job)
            return WorkerDied("a bake worker process died (terminated abruptly)")
        return bake_chunk(job)

    progress = Recorder()
    report = bake([root], str(tmp_path / "cache"), runner=FakeRunner(answer), progress=progress)
    lost = len(killed[0].items)
    assert not report.ok
    assert report.totals["failed"] == lost and report.totals["baked"] == SAMPLE_VARIANTS - lost
    failure = report.failures[0].failure
    assert failure.kind == "WorkerDied" and failure.path == killed[0].asset and killed[0].asset in failure.headline
    assert progress.started == [(SAMPLE_VARIANTS, "fake runner")] and progress.last == (SAMPLE_VARIANTS, SAMPLE_VARIANTS - lost, lost)
    # The message is printed once; the rest of the chunk is counted.
    assert sum("the bake worker failed" in m for m in progress.messages) == 1


def test_results_from_a_worker_of_another_build_are_refused(tmp_path, gpu):
    root = copy_samples(str(tmp_path / "assets"))

    def answer(job):
        result = bake_chunk(job)
        return ChunkResult(result.asset, result.index, result.outcomes, "farm-7:1234", versions=(99, 99))

    cache = VariantCache(str(tmp_path / "cache"))
    report = bake([os.path.join(root, "particles.computeShader")], cache, runner=FakeRunner(answer))
    assert report.totals["failed"] == 1 and "install the same build on every worker" in report.failures[0].failure.headline
    assert "farm-7:1234" in report.failures[0].failure.headline
    assert cache.stats(scan=True).entries == 0  # nothing from it was written


def test_failures_come_back_as_data_with_the_users_file(tmp_path, gpu):
    write_asset(str(tmp_path / "a" / "broken.computeShader"), BROKEN_YAML, BROKEN_WGSL)
    progress = Recorder()
    report = bake([str(tmp_path / "a")], str(tmp_path / "cache"), progress=progress)
    assert isinstance(report, BakeReport) and not report.ok and report.totals["failed"] == 2
    wgsl = str(tmp_path / "a" / "broken.computeShader" / "kernel.wgsl")
    assert {(f.failure.path, f.failure.line, f.failure.col) for f in report.failures} == {(wgsl, 5, 29)}
    assert progress.messages[0].startswith(f"{wgsl}:5:29: ") and progress.messages[-1] == f"{wgsl}:5:29: the same error in 1 more variant(s)"


def test_two_copies_of_one_asset_bake_their_shared_variants_once(tmp_path, gpu):
    root = copy_samples(str(tmp_path / "assets"))
    shutil.copytree(os.path.join(root, "particles.computeShader"), os.path.join(root, "copy", "particles.computeShader"))
    report = bake([root], str(tmp_path / "cache"))
    assert report.ok and report.totals["baked"] == SAMPLE_VARIANTS and report.totals["skipped"] == 1


@pytest.mark.parametrize("crlf", [False, True])
def test_a_broken_copy_of_a_broken_asset_fails_at_its_own_files(tmp_path, gpu, crlf):
    # Review helper 195: the copy shares the variants' keys (the same texts; CRLF or a BOM too),
    # which bake once; its variants were "skipped" and the copy was named nowhere.
    a = write_asset(str(tmp_path / "assets" / "a.computeShader"), BROKEN_YAML, BROKEN_WGSL)
    b = write_asset(str(tmp_path / "assets" / "b.computeShader"), BROKEN_YAML, BROKEN_WGSL.replace("\n", "\r\n") if crlf else BROKEN_WGSL)
    progress = Recorder()
    report = bake([str(tmp_path / "assets")], str(tmp_path / "cache"), progress=progress)
    assert not report.ok and report.totals["failed"] == 4 and report.totals["skipped"] == 0
    where = {(f.asset, f.failure.path, f.failure.line, f.failure.col) for f in report.failures}
    assert where == {(a, os.path.join(a, "kernel.wgsl"), 5, 29), (b, os.path.join(b, "kernel.wgsl"), 5, 29)}
    assert any(m.startswith(os.path.join(b, "kernel.wgsl") + ":5:29: ") for m in progress.messages), progress.messages
    assert report.assets[b].failed == 2 and report.assets[a].failed == 2
    fixed = write_asset(a, BROKEN_YAML, BROKEN_WGSL.replace("heigth", "T(2)"))
    report = bake([str(tmp_path / "assets")], str(tmp_path / "cache"))
    assert {f.asset for f in report.failures} == {b} and report.assets[fixed].baked == 2  # only the broken copy fails now


@pytest.mark.parametrize(
    ("first", "copy", "paths"), [("a", "aa", ["a.computeShader", "aa.computeShader"]), ("assets/k", "backup/assets/k", ["assets", "backup/assets"])]
)
def test_a_broken_copy_whose_path_holds_its_twins_is_named_at_its_own_files(tmp_path, gpu, monkeypatch, first, copy, paths):
    # Review helper 198: the twin's paths were swapped in twice ("aaa.computeShader", and
    # "backup/backup/assets/k..."), naming files that do not exist.
    monkeypatch.chdir(tmp_path)
    for folder in (first, copy):
        write_asset(f"{folder}.computeShader", BROKEN_YAML, BROKEN_WGSL)
    report = bake(paths, str(tmp_path / "cache"))
    assert report.totals["failed"] == 4
    for f in report.failures:
        assert f.failure.path == os.path.join(f.asset, "kernel.wgsl") and os.path.exists(f.failure.path), (f.asset, f.failure.path)
        assert f.failure.headline.startswith(f"{f.failure.path}:5:29: "), f.failure.headline


def test_an_interrupted_bake_reports_the_copies_of_what_it_had_done(tmp_path, gpu):
    # Review helper 198: a copy of a cached asset was listed as skipped before the twin change;
    # an interrupted bake then left its variants out of the report.
    import signal

    from engine_plugin.bake.report import BakeInterrupted

    good = BROKEN_WGSL.replace("heigth", "T(2)")
    root = tmp_path / "assets"
    a = write_asset(str(root / "a.computeShader"), BROKEN_YAML, good)
    assert bake([a], str(tmp_path / "cache")).ok
    b = write_asset(str(root / "b.computeShader"), BROKEN_YAML, good)
    write_asset(str(root / "c.computeShader"), BROKEN_YAML, good.replace("T(2)", "T(3)"))

    def answer(job):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        return bake_chunk(job)

    with pytest.raises(BakeInterrupted) as info:
        bake([str(root)], str(tmp_path / "cache"), runner=FakeRunner(answer))
    assert sorted(v.status for v in info.value.report.variants if v.asset == b) == ["skipped", "skipped"]


def test_a_ctrl_c_swallowed_where_it_landed_still_stops_the_bake(tmp_path, gpu):
    # A KeyboardInterrupt raised inside a gc callback (distributed installs one) is printed as
    # "ignored" and lost: a Dask bake ran on to its end and exited 0 (review helper 120).
    import signal

    root = copy_samples(str(tmp_path / "assets"))
    answered = []

    def answer(job):
        if not answered:
            try:
                signal.raise_signal(signal.SIGINT)  # Ctrl-C, landing where it is swallowed
            except KeyboardInterrupt:
                pass
        answered.append(job)
        return bake_chunk(job)

    with pytest.raises(KeyboardInterrupt):
        bake([root], str(tmp_path / "cache"), runner=FakeRunner(answer))
    assert len(answered) == 1  # stopped after the chunk it landed in
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("where", ["after the last chunk", "while the runner shuts down"])
def test_a_ctrl_c_swallowed_at_the_end_of_the_bake_still_stops_it(tmp_path, gpu, where):
    # Noted but looked at only before each chunk: one swallowed as the last chunk came in, or
    # while the runner shut down, let the bake return ok (helper 121).
    import signal

    def swallowed_ctrl_c():
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass

    class LateRunner(FakeRunner):
        def run(self, jobs):
            yield from super().run(jobs)
            if where == "after the last chunk":
                swallowed_ctrl_c()

        def __exit__(self, *exc):
            if where == "while the runner shuts down":
                swallowed_ctrl_c()

    root = copy_samples(str(tmp_path / "assets"))
    with pytest.raises(KeyboardInterrupt):
        bake([root], str(tmp_path / "cache"), runner=LateRunner(bake_chunk))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_while_finished_writes_are_counted_counts_each_once(tmp_path, gpu, monkeypatch):
    # drain() kept its list of writes until its loop was over: a Ctrl-C landing mid-loop left
    # the ones it had counted there, and __exit__'s drain(wait=True) counted them again
    # (totals.baked 10, 8 entries on disk: review helper 241).
    import signal

    from engine_plugin.bake import driver
    from engine_plugin.bake.report import BakeInterrupted

    drain, warn = driver._Bake.drain, driver._Bake.warn
    in_pass, sent = [0], []

    def drain_finished(self, wait=False):
        for fut, *_ in self._writes:
            fut.result()  # every write of the chunk done: all of them are counted in this pass
        in_pass[0] = 0
        return drain(self, wait)

    def warn_then_ctrl_c(self, asset, out):
        in_pass[0] += 1
        if in_pass[0] == 3 and not sent:
            sent.append(True)
            signal.raise_signal(signal.SIGINT)  # a Ctrl-C landing while the third is counted
        return warn(self, asset, out)

    monkeypatch.setattr(driver._Bake, "drain", drain_finished)
    monkeypatch.setattr(driver._Bake, "warn", warn_then_ctrl_c)
    root = copy_samples(str(tmp_path / "assets"))
    cache = str(tmp_path / "cache")
    with pytest.raises(BakeInterrupted) as info:
        bake([root], cache)
    assert sent
    report = info.value.report
    baked = [v.key for v in report.variants if v.status == "baked"]
    files = [name for name in os.listdir(cache) if name.endswith(".msgpack")]
    assert len(baked) == len(set(baked)), "a variant counted twice"
    assert report.totals["baked"] == len(baked) == len(files), (report.totals, len(baked), len(files))


class _Outcome:
    """What ``_Bake._written`` reads of a variant outcome that was written."""

    def __init__(self, key):
        self.key, self.spec, self.seconds, self.lowered = key, None, 0.0, None


def _draining_bake():
    from engine_plugin.bake import driver
    from engine_plugin.bake.progress import NoProgress
    from engine_plugin.bake.report import BakeReport

    bake = driver._Bake(cache=None, progress=NoProgress(), report=BakeReport(cache="c"))
    bake.report.add = lambda *a, **k: None
    return bake


def test_an_interrupt_while_a_write_is_awaited_leaves_it_to_be_counted():
    # Review helper 243: an embedder's own SIGINT handler (the bake leaves it in place) raised
    # while drain(wait=True) waited for a write: that write had left the list already and was
    # never counted, though its entry was written.
    import signal
    import threading
    from concurrent.futures import ThreadPoolExecutor

    def embedder(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, embedder)
    try:
        bake = _draining_bake()
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(lambda d=d: (time.sleep(d), True)[1]) for d in (0.0, 1.0, 1.0)]
            bake._writes = [(f, "asset", _Outcome(f"k{i}"), "w") for i, f in enumerate(futures)]
            threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            with pytest.raises(KeyboardInterrupt):
                bake.drain(wait=True)
            bake.drain(wait=True)  # what the bake's __exit__ does next
    finally:
        signal.signal(signal.SIGINT, old)
    assert (bake.baked, bake.failed, len(bake._writes)) == (3, 0, 0)


def test_a_ctrl_c_while_a_slow_write_is_awaited_is_raised_at_once():
    # Review helper 243: the bake's own handler held a Ctrl-C for the whole wait of
    # drain(wait=True): raised when a 3 s write returned, not when it was pressed.
    import signal
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from engine_plugin.bake import driver

    bake = _draining_bake()
    with ThreadPoolExecutor(1) as pool:
        bake._writes = [(pool.submit(lambda: (time.sleep(3.0), True)[1]), "a", _Outcome("k"), "w")]
        with driver._interrupt_flag():
            threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            t0 = time.perf_counter()
            with pytest.raises(KeyboardInterrupt):
                bake.drain(wait=True)
            assert time.perf_counter() - t0 < 2.0
        bake.drain(wait=True)
    assert (bake.baked, len(bake._writes)) == (1, 0)
