"""Timing harness, result table and JSON report."""

from __future__ import annotations

import gc
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["Result", "CASES", "bench_kernels", "case", "median_time", "run_cases", "main"]


def bench_kernels() -> str:
    """The bench's kernels (package data): a copy of ``assets/samples/reference.computeShader``,
    so an installed bench measures the same kernel as the published results (a test keeps the
    two identical)."""
    from ..assets.builtin import resource_folder

    return resource_folder("engine_plugin.bench", "kernels")


@dataclass
class Result:
    name: str
    plugin: float  # median, in `unit`
    raw: float | None
    unit: str
    target: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.raw in (None, 0):
            return None
        return self.plugin / self.raw


CASES: dict[str, Callable[[dict], "Result | list[Result]"]] = {}


def case(name: str):
    def register(fn):
        CASES[name] = fn
        return fn

    return register


def median_time(fn: Callable[[], object], repeat: int, warmup: int = 3, inner: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` samples of ``inner`` calls each."""
    for _ in range(warmup):
        fn()
    samples = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) / inner)
    finally:
        if gc_was:
            gc.enable()
    return statistics.median(samples)


def run_cases(names: Sequence[str] | None = None, quick: bool = False, **options: object) -> list[Result]:
    """Run cases by name (default: all); a case answers one Result or a list of them."""
    from .gpu_timing import want_timestamps

    want_timestamps()
    from . import cases  # noqa: F401  (registers the cases)

    opts = {"quick": quick, **options}
    out: list[Result] = []
    for name in names or list(CASES):
        found = CASES[name](opts)
        out.extend(found if isinstance(found, list) else [found])
    return out


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        if v < 1e-3:
            return f"{v * 1e6:.1f} µs"
        if v < 1:
            return f"{v * 1e3:.2f} ms"
        return f"{v:.2f} s"
    return f"{v:.3g} {unit}"


# The README's case letters (a)-(i), as this round measures each.
LETTERS = {
    "a": "run_host",
    "b": "batch100",
    "c": "oneshot",
    "d": "frame",
    "e": "uploads",
    "f": "readback_latency",
    "g": "reload_latency",
    "h": "warm_start",
    "i": "kernels",
}


def _mib_list(text: str) -> list[int]:
    """``--sizes``: whole MiB counts of at least 1, comma-separated."""
    import argparse

    parts = text.split(",")
    if not all(p.strip().isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"whole MiB counts of at least 1, comma-separated (256,1024), not {text!r}")
    return [int(p) for p in parts]


def main(argv: Sequence[str] | None = None, tables: bool = True) -> int:
    """``engine-plugin bench``; ``tables``: print the results table (needs rich), else the
    per-case lines alone."""
    from ..commands.contract import OneLineParser, PlainConsole, UsageError, check_output_file, whole_number_arg, write_json
    from . import cases  # noqa: F401  (registers every case: their names go into the help)

    parser = OneLineParser(prog="engine-plugin bench")
    letters = ", ".join(f"{k}={v}" for k, v in LETTERS.items())
    parser.add_argument("cases", nargs="*", help=f"case names (default: all): {', '.join(CASES)}; or the README's letters: {letters}")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON ('-': stdout, the table then goes to stderr)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument("--sizes", type=_mib_list, metavar="MIB,...", help="kernel cases: array sizes in MiB (default 256,1024 on a GPU, 8 on a CPU adapter)")
    parser.add_argument("--reps", type=whole_number_arg(1), metavar="N", help="kernel cases: dispatches per timed submission")
    parser.add_argument("--runs", type=whole_number_arg(3), metavar="N", help="kernel cases: timed runs per figure (at least 3)")
    args = parser.parse_args(argv)
    if args.json:
        try:
            check_output_file(args.json, "--json")  # before the cases run, not after
        except UsageError as exc:
            parser.error(str(exc))
    from .gpu_timing import want_timestamps

    want_timestamps()  # GPU figures from timestamp queries where the adapter has them
    args.cases = [LETTERS.get(c.strip("()"), c) for c in args.cases]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    from ..device.context import get_context

    ctx = get_context()
    console: Any
    table: Any = None
    if tables:
        from rich.console import Console  # after the arguments: --help works without the [cli] extra
        from rich.table import Table

        console = Console(stderr=args.json == "-")
        table = Table(title="engine_plugin vs raw wgpu-py, same run (plugin, raw: medians; ratio: of those medians; a note's range: per-run ratios)")
        for col in ("case", "plugin", "raw", "ratio", "target", "note"):
            table.add_column(col)
    else:
        console = PlainConsole(sys.stderr if args.json == "-" else sys.stdout)
    console.print(f"adapter: {ctx.adapter_name}")
    results = []
    opts = {"quick": args.quick, "sizes": args.sizes, "reps": args.reps, "runs": args.runs}
    for name in args.cases or list(CASES):
        found = CASES[name](opts)
        for r in found if isinstance(found, list) else [found]:
            results.append(r)
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
            if table is not None:
                table.add_row(r.name, _fmt(r.plugin, r.unit), _fmt(r.raw, r.unit), ratio, r.target, r.note.strip().rstrip(";").strip())
            note = r.note.strip().rstrip(";").strip()
            console.print(f"  {r.name}: plugin {_fmt(r.plugin, r.unit)}, raw {_fmt(r.raw, r.unit)}, ratio {ratio}" + (f"  ({note})" if note else ""))
    if table is not None:
        console.print(table)
    if args.json:
        report = {
            "adapter": ctx.adapter_name,
            "adapter_info": {k: str(v) for k, v in dict(ctx.adapter.info).items()} if ctx.adapter is not None else {},
            "features": sorted(ctx.device.features),
            "command": " ".join(["engine-plugin", "bench", *(argv if argv is not None else sys.argv[1:])]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "python": platform.python_version(),
            "results": [dict(asdict(r), ratio=r.ratio) for r in results],
        }
        write_json(report, args.json)
        if args.json != "-":
            console.print(f"wrote {args.json}")
    return 0
