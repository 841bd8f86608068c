"""The result of a bake: per-asset counts, every variant's fate, the failures; as a summary
table for people and as JSON for build systems.

JSON report (``--json REPORT``), format 1::

    {"format": 1, "tool": "engine-plugin bake", "engine_plugin": "0.1.0",
     "cache_format": 1, "lowering_version": "10.<hash of the lowering code>", "cache": "/abs/cache",
     "runner": "2 local processes", "workers": 2, "wall_s": 3.1, "startup_s": 0.0,
     "variants_per_s": 64.2, "ok": false,
     "totals": {"variants": 200, "baked": 198, "skipped": 0, "failed": 2,
                "assets": 12, "assets_failed": 0},
     "assets": [{"asset": "assets/x.computeShader", "variants": 25, "baked": 25,
                 "skipped": 0, "failed": 0, "work_s": 0.41, "error": null}, ...],
     "variants": [{"asset": ..., "key": "<64 hex>", "spec": {"T": "f32"}, "columns": {},
                   "status": "baked" | "skipped" | "failed", "seconds": 0.012,
                   "worker": "host:pid"}, ...],
     "failures": [{"asset": ..., "spec": {...} | null, "key": ... | null, "kind": "CompileError",
                   "path": "assets/x.computeShader/kernel.wgsl", "line": 17, "col": 5,
                   "message": "path:17:5: ...", "rendered": "... with the line and a caret"}],
     "lost_workers": [{"worker": "tcp://10.0.0.7:40123", "chunks": [3, 7], "variants": 24}],
     "retried_chunks": 2,
     "notes": ["..."],
     "remote": null | {"url": "redis://farm:6379/0", "writes": 198, "bytes_written": 1534000,
                       "uploaded": 0, "errors": 0, "timeouts": 0, "reachable": true, ...}}

``remote`` (with ``--remote``): the remote tier's counters for this bake; ``uploaded`` counts
entries the local cache already held and the server lacked.

A variant's ``key`` is its cache file name without ``.msgpack``. A failure with ``spec: null``
is the whole asset (unreadable folder, schema error, a ``bake:`` list the schema refuses): its
row has ``error`` set and counts in ``assets_failed``, not in the variant counts. A failure with
a spec but ``key: null`` is a usage-log variant the schema no longer accepts. ``lost_workers``
are the Dask workers that left during the bake and the chunks they were running, which the
scheduler ran again on the others (those variants' ``worker`` says where they finally baked),
or the local pool processes that died (``host:pid``) and the unfinished chunks a new pool ran.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from ..files import printable, shown_path
from ..lowering import VariantSpec
from .worker import Failure

__all__ = ["AssetSummary", "BakeInterrupted", "BakeReport", "VariantRecord", "FailureRecord", "REPORT_FORMAT"]

REPORT_FORMAT = 1


@dataclass
class AssetSummary:
    asset: str
    variants: int = 0
    baked: int = 0
    skipped: int = 0
    failed: int = 0
    work_s: float = 0.0
    error: str | None = None  # the asset-level failure's headline


@dataclass(frozen=True)
class VariantRecord:
    asset: str
    key: str
    spec: VariantSpec
    status: str  # baked | skipped | failed
    seconds: float = 0.0
    worker: str = ""  # host:pid of the process that baked it ("" when skipped)


@dataclass(frozen=True)
class FailureRecord:
    asset: str
    spec: VariantSpec | None
    key: str | None
    failure: Failure


def _gh_data(text: str) -> str:
    # GitHub's workflow-command escaping (actions/toolkit, command.ts); other control characters
    # (an ESC in a file name) spelled out, as on the terminal (review helper 132).
    return printable(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def _spec_json(spec: VariantSpec | None) -> tuple[Any, Any]:
    if spec is None:
        return None, None
    return dict(spec.values), {k: list(v) for k, v in spec.columns}


class BakeInterrupted(KeyboardInterrupt):
    """A Ctrl-C (or SIGTERM: ``signum``) ended the bake: ``report`` holds what was done by
    then (``interrupted``)."""

    def __init__(self, report: "BakeReport", signum: int = signal.SIGINT) -> None:
        super().__init__()
        self.report = report
        self.signum = signum


@dataclass
class BakeReport:
    """Everything a bake did. ``ok`` is true when nothing failed (the exit status)."""

    cache: str
    runner: str = "none (everything was already baked)"
    workers: int = 0
    wall_s: float = 0.0
    startup_s: float = 0.0
    assets: dict[str, AssetSummary] = field(default_factory=dict)
    variants: list[VariantRecord] = field(default_factory=list)
    failures: list[FailureRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Those of ``notes`` a -q bake says on stderr too: the cache lacks what the user thinks
    # baked (an asset edited mid-bake exited 0 with nothing said, review helper 241).
    loud_notes: list[str] = field(default_factory=list)
    corrupt_replaced: int = 0
    evicted: int = 0  # entries the cache's size cap evicted during the bake (baked ones among them)
    interrupted: bool = False  # ended by Ctrl-C or SIGTERM: what it lists is what was done by then
    planned: int = 0  # the variants it set out to bake or skip (totals count what it did)
    lost_workers: list[dict[str, Any]] = field(default_factory=list)

    def lose_worker(self, worker: str, chunks: tuple[int, ...], variants: int) -> None:
        """A worker left mid-bake while running ``chunks`` (retried on the other workers)."""
        self.lost_workers.append({"worker": worker, "chunks": list(chunks), "variants": variants})

    @property
    def retried_chunks(self) -> int:
        return sum(len(w["chunks"]) for w in self.lost_workers)

    remote: dict[str, Any] | None = None  # the remote tier's counters when the bake had one

    def asset(self, name: str) -> AssetSummary:
        found = self.assets.get(name)
        if found is None:
            found = self.assets[name] = AssetSummary(name)
        return found

    def add(self, asset: str, key: str, spec: VariantSpec, status: str, seconds: float = 0.0, worker: str = "") -> None:
        row = self.asset(asset)
        row.variants += 1
        setattr(row, status, getattr(row, status) + 1)
        row.work_s += seconds
        self.variants.append(VariantRecord(asset, key, spec, status, seconds, worker))

    def fail(self, asset: str, spec: VariantSpec | None, key: str | None, failure: Failure, seconds: float = 0.0, worker: str = "") -> None:
        if spec is None:  # the asset itself (unreadable, schema error): no variants known
            self.asset(asset).error = failure.headline
        elif key is not None:
            self.add(asset, key, spec, "failed", seconds, worker)
        else:  # a recorded variant the schema refuses: no key can be computed
            row = self.asset(asset)
            row.variants += 1
            row.failed += 1
        self.failures.append(FailureRecord(asset, spec, key, failure))

    # -- totals ------------------------------------------------------------------------------
    @property
    def totals(self) -> dict[str, int]:
        rows = self.assets.values()
        out = {k: sum(getattr(r, k) for r in rows) for k in ("variants", "baked", "skipped", "failed")}
        out["planned"] = self.planned
        out["assets"] = len(self.assets)
        out["assets_failed"] = sum(1 for r in rows if r.error)
        return out

    @property
    def ok(self) -> bool:
        return not self.failures and not self.interrupted

    @property
    def variants_per_s(self) -> float:
        baked = self.totals["baked"]
        return baked / self.wall_s if self.wall_s > 0 else 0.0

    # -- output ------------------------------------------------------------------------------
    def as_json(self) -> dict[str, Any]:
        from .. import __version__
        from ..lowering import LOWERING_VERSION
        from ..lowering.fingerprint import CACHE_FORMAT_VERSION

        variants = []
        for v in self.variants:
            spec, cols = _spec_json(v.spec)
            variants.append(
                {"asset": v.asset, "key": v.key, "spec": spec, "columns": cols, "status": v.status, "seconds": round(v.seconds, 6), "worker": v.worker}
            )
        failures = []
        for f in self.failures:
            spec, cols = _spec_json(f.spec)
            failures.append({"asset": f.asset, "spec": spec, "columns": cols, "key": f.key, **f.failure.as_dict()})
        return {
            "format": REPORT_FORMAT,
            "tool": "engine-plugin bake",
            "engine_plugin": __version__,
            "cache_format": CACHE_FORMAT_VERSION,
            "lowering_version": LOWERING_VERSION,
            "cache": self.cache,
            "runner": self.runner,
            "workers": self.workers,
            "wall_s": round(self.wall_s, 4),
            "startup_s": round(self.startup_s, 4),
            "variants_per_s": round(self.variants_per_s, 2),
            "ok": self.ok,
            "interrupted": self.interrupted,
            "totals": self.totals,
            "corrupt_replaced": self.corrupt_replaced,
            "evicted": self.evicted,
            "remote": self.remote,
            "assets": [
                {
                    "asset": r.asset,
                    "variants": r.variants,
                    "baked": r.baked,
                    "skipped": r.skipped,
                    "failed": r.failed,
                    "work_s": round(r.work_s, 4),
                    "error": r.error,
                }
                for r in self.assets.values()
            ],
            "variants": variants,
            "failures": failures,
            "lost_workers": [dict(w) for w in self.lost_workers],
            "retried_chunks": self.retried_chunks,
            "notes": list(self.notes),
        }

    def github_annotations(self) -> list[str]:
        """Every failure as a GitHub Actions workflow command
        (``::error file=PATH,line=L,col=C,title=KIND::message``), from the file, line and
        column it carries (none for a failure without a place)."""
        out = []
        for f in self.failures:
            fail = f.failure
            message = fail.headline
            if fail.path:
                where = ":".join(str(x) for x in (fail.path, fail.line, fail.col) if x is not None)
                message = message.removeprefix(where + ": ")
            if f.spec is not None:
                message += f" (variant {f.spec.label()})"
            props = []
            if fail.path:
                props.append(f"file={_gh_prop(fail.path)}")
                if fail.line is not None:
                    props.append(f"line={fail.line}")
                    if fail.col is not None:
                        props.append(f"col={fail.col}")
            props.append(f"title={_gh_prop(fail.kind)}")
            out.append(f"::error {','.join(props)}::{_gh_data(message)}")
        return out

    def summary_table(self) -> Any:
        """A ``rich`` table: asset, variants, baked, skipped, failed, and the worker time spent
        lowering and compiling its variants (summed over workers); a total row."""
        from rich.table import Table
        from rich.text import Text

        table = Table(title="bake summary", title_justify="left", show_footer=False)
        table.add_column("asset", overflow="fold")
        for name in ("variants", "baked", "skipped", "failed"):
            table.add_column(name, justify="right")
        table.add_column("work time", justify="right")
        for r in self.assets.values():
            failed = str(r.failed) if not r.error else "asset"
            # Text, not markup: k[old].computeShader showed as k.computeShader, and a path
            # holding '[/]' ended the bake as an engine_plugin bug (review helper 224).
            table.add_row(Text(printable(shown_path(r.asset))), str(r.variants), str(r.baked), str(r.skipped), failed, f"{r.work_s:.2f}s")
        t = self.totals
        table.add_section()
        table.add_row("total", str(t["variants"]), str(t["baked"]), str(t["skipped"]), str(t["failed"]), f"{sum(r.work_s for r in self.assets.values()):.2f}s")
        return table

    def remote_line(self) -> str | None:
        """One line on the remote tier (None when the bake had none)."""
        r = self.remote
        if r is None:
            return None
        state = "" if r.get("reachable") else " (unreachable or too slow: the local cache has everything; rerun to upload)"
        if r.get("compared") is False and r.get("reachable"):
            state += " (--remote-verify could not read the tier's values: nothing was compared)"
        return (
            f"remote {r['url']}: wrote {r['writes']} entries ({r['bytes_written']} bytes, {r['uploaded']} from the local cache at the end"
            + (f", {r['replaced']} replacing other bytes the server held" if r.get("replaced") else "")
            + "), "
            f"{r['errors']} errors, {r['timeouts']} timeouts{state}"
        )

    def closing_line(self) -> str:
        t = self.totals
        rate = f" ({self.variants_per_s:.1f} variants/s)" if t["baked"] else ""
        where = f" on {self.runner}" if self.workers else ""
        bad = f"; {t['assets_failed']} asset(s) could not be read or parsed" if t["assets_failed"] else ""
        if self.lost_workers:
            names = ", ".join(w["worker"] for w in self.lost_workers)
            bad += f"; lost {len(self.lost_workers)} worker(s) ({names}), {self.retried_chunks} chunk(s) retried on the others"
        return f"baked {t['baked']}, skipped {t['skipped']}, failed {t['failed']} of {t['variants']} variants in {self.wall_s:.2f}s{rate}{where}{bad}"
