"""Progress while baking: a ``rich`` bar on a terminal, plain throttled lines otherwise.

Both write to stderr (stdout carries the summary table), and print failures as they arrive
above the bar, so a long bake shows its first error without waiting for the end.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, TextIO

from ..files import printable

__all__ = ["PlainProgress", "RichProgress", "NoProgress", "make_progress"]


class NoProgress:
    """Progress that shows nothing but failures and notes.

    A failure is one line, ``engine-plugin bake: path:line:col: message (in ASSET variant V)``;
    with ``verbose`` the source line and caret follow it.
    """

    verbose = False
    prefix = ""  # the CLI sets "engine-plugin bake: "
    show_warnings = False  # a quiet bake's (and the library's) say errors only

    def __init__(self, stream: TextIO | IO[str] | None = None):
        self.stream = stream or sys.stderr
        self.lost = 0  # workers lost mid-bake
        self.retried = 0  # chunks they were running, retried elsewhere

    def start(self, total: int, label: str) -> None:
        pass

    def advance(self, done: int, baked: int, failed: int) -> None:
        pass

    def message(self, text: str) -> None:
        print(printable(text), file=self.stream, flush=True)

    def failure(self, line: str, detail: str = "") -> None:
        """One failure: a line (prefixed with the command), the detail only when verbose."""
        self.message(self.prefix + " ".join(part.strip() for part in line.splitlines() if part.strip()))
        if self.verbose and detail:
            self.message(detail.rstrip("\n"))

    def warning(self, line: str, detail: str = "") -> None:
        """A warning (a variant beyond WebGPU's default limits), as a failure is shown; only
        where warnings are shown (not under -q)."""
        if self.show_warnings:
            self.failure(line, detail)

    def lost_worker(self, worker: str, chunks: int, variants: int) -> None:
        """A worker left mid-bake; its ``chunks`` run again on the other workers."""
        self.lost += 1
        self.retried += chunks
        if not chunks:  # what it ran had ended (a chunk KilledWorker failed: said as its failure)
            self.message(f"{self.prefix}lost worker {worker}; nothing it ran is left to run again")
            return
        self.message(f"{self.prefix}lost worker {worker}; {chunks} chunk(s) ({variants} variants) not finished are run again on the workers left")

    def stop(self) -> None:
        pass


class PlainProgress(NoProgress):
    """One line at most every ``interval`` seconds, and one at the end: ``bake: 40/200 ...``."""

    show_warnings = True

    def __init__(self, stream: TextIO | None = None, interval: float = 1.0):
        super().__init__(stream)
        self.interval = interval
        self.total = 0
        self._t0 = 0.0
        self._last = 0.0
        self._state = (0, 0, 0)
        self._printed: tuple[int, int, int] | None = None

    def start(self, total: int, label: str) -> None:
        self.total = total
        self._t0 = self._last = time.monotonic()
        self.message(f"bake: {total} variant(s) to bake on {label}")

    def _line(self) -> None:
        done, baked, failed = self._state
        self._printed = self._state
        lost = f", {self.lost} worker(s) lost, {self.retried} chunk(s) retried" if self.lost else ""
        self.message(f"bake: {done}/{self.total} variants ({baked} baked, {failed} failed{lost}) {time.monotonic() - self._t0:.1f}s")

    def advance(self, done: int, baked: int, failed: int) -> None:
        self._state = (done, baked, failed)
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._line()

    def stop(self) -> None:
        if self.total and self._printed != self._state:
            self._line()


class RichProgress(NoProgress):
    """A ``rich`` progress bar (variants done, baked/failed, elapsed, remaining) on stderr."""

    show_warnings = True

    def __init__(self, console: Any = None):
        from rich.console import Console

        self.console = console or Console(stderr=True)
        super().__init__(self.console.file)
        self._progress: Any = None
        self._task: Any = None

    def start(self, total: int, label: str) -> None:
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]bake[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        # The description is markup (the counts are coloured); the label may name a scheduler
        # address the user typed, which is escaped so its brackets stay text.
        self._label = escape(printable(label))
        self._task = self._progress.add_task(f"on {self._label}", total=total)

    def advance(self, done: int, baked: int, failed: int) -> None:
        if self._progress is not None:
            bad = f", [red]{failed} failed[/]" if failed else ""
            if self.lost:
                bad += f", [yellow]{self.lost} worker(s) lost, {self.retried} chunk(s) retried[/]"
            self._progress.update(self._task, completed=done, description=f"{baked} baked{bad} on {self._label}")

    def message(self, text: str) -> None:
        # Above the bar while it runs; markup off: WGSL is full of [brackets].
        self.console.print(printable(text), markup=False, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def make_progress(mode: str = "auto", verbose: bool = False) -> NoProgress:
    """``auto``: rich on a terminal (stderr), plain lines otherwise; or ``rich``/``plain``/``none``.
    ``verbose``: failures carry their source line and caret."""
    if mode == "auto":
        mode = "rich" if sys.stderr.isatty() else "plain"
    progress: NoProgress
    if mode == "rich":
        progress = RichProgress()
    elif mode == "plain":
        progress = PlainProgress()
    elif mode == "none":
        progress = NoProgress()
    else:
        raise ValueError(f"progress is auto, rich, plain or none, not {mode!r}")
    progress.verbose = verbose
    return progress
