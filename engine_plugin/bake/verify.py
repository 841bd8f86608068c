"""Checking what a worker sends before the client writes it to the cache.

A worker is another process, often another machine (Dask): one running another build, one
that is buggy, or one that is hostile can answer anything. The cache is trusted by every game
that starts from it, so the client writes an entry only when it agrees with what the client
can derive itself:

- the key is one the client asked that chunk for, with the spec it asked for;
- the lowered variant is *equal* to the client's own lowering of that spec (lowering is pure
  Python, no device: the client lowers again and compares every field, source, binding plan
  and source map alike). Measured 14 ms a variant on average over the repository's assets on
  a 2-core machine, against 20-60 ms for the worker's GPU compile of it: a client keeps up
  with a few workers; a large farm makes the client's lowering the bottleneck.

What the worker adds that the client cannot re-derive is the GPU validation (a compile on its
device); a refused entry is reported as a failure naming the worker. The entry written is the
client's own lowering, so nothing the worker built ever reaches the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..errors import PluginError
from ..lowering import Lowered, lower, parse
from .worker import ChunkJob, ChunkResult, Failure, VariantOutcome, failure_from

__all__ = ["Checked", "check_chunk"]


@dataclass(frozen=True)
class Checked:
    """One outcome of a chunk after checking: ``lowered`` (the client's own) to write, or
    ``failure`` to report. ``outcome`` is what the worker sent (or a stand-in for a variant it
    did not answer)."""

    outcome: VariantOutcome
    lowered: Lowered | None = None
    failure: Failure | None = None


def _refused(worker: str, job: ChunkJob, why: str) -> Failure:
    text = f"{job.asset}: refused the entry from worker {worker}: {why}; nothing was written (a worker of another build, or a faulty or hostile one?)"
    return Failure("BakeVerificationError", text, text, job.asset)


def check_chunk(job: ChunkJob, result: ChunkResult) -> Iterator[Checked]:
    """Each outcome of ``result`` checked against ``job``, then a failure for every requested
    variant the worker did not answer. Never raises for what the worker sent."""
    requested = {item.key: item for item in job.items}
    answered: set[str] = set()
    schema = None
    for out in result.outcomes:
        item = requested.get(out.key) if isinstance(out, VariantOutcome) else None
        if item is None:
            key = getattr(out, "key", None)
            stand_in = out if isinstance(out, VariantOutcome) else VariantOutcome(str(key), job.items[0].spec, 0.0)
            yield Checked(stand_in, failure=_refused(result.worker, job, f"key {str(key)[:16]}... was not requested in this chunk"))
            continue
        if out.key in answered:
            yield Checked(out, failure=_refused(result.worker, job, f"a second answer for {item.spec.label()}"))
            continue
        answered.add(out.key)
        if out.spec != item.spec:
            yield Checked(
                replace_spec(out, item), failure=_refused(result.worker, job, f"the answer for {item.spec.label()} claims the spec {_label(out.spec)}")
            )
            continue
        if out.lowered is None:
            yield Checked(out, failure=out.failure)  # the worker's own failure report (or none: the driver says so)
            continue
        try:
            if schema is None:
                schema = parse(job.yaml_text, job.yaml_path)  # memoised: the plan parsed the same text
            mine = lower(schema, job.wgsl_text, item.spec, wgsl_path=job.wgsl_path, modules=job.module_texts)
        except PluginError as exc:  # the worker lowered what the client cannot: trust the client
            yield Checked(out, failure=failure_from(exc))
            continue
        if out.lowered != mine:
            yield Checked(
                out, failure=_refused(result.worker, job, f"its lowering of {item.spec.label()} differs from this client's ({_difference(out.lowered, mine)})")
            )
            continue
        yield Checked(out, lowered=mine)
    for key, item in requested.items():
        if key not in answered:
            stand_in = VariantOutcome(key, item.spec, 0.0)
            yield Checked(stand_in, failure=_refused(result.worker, job, f"it answered nothing for {item.spec.label()}"))


def replace_spec(out: VariantOutcome, item) -> VariantOutcome:
    """``out`` reported under the spec the client asked for (the report lists requested variants)."""
    return VariantOutcome(out.key, item.spec, out.seconds, failure=out.failure)


def _label(spec: object) -> str:
    label = getattr(spec, "label", None)
    return label() if callable(label) else type(spec).__name__


def _difference(theirs: object, mine: Lowered) -> str:
    # Which field differs, for the report; never the contents (they may be anything).
    if not isinstance(theirs, Lowered):
        return f"a {type(theirs).__name__}, not a lowered variant"
    for name in Lowered.__dataclass_fields__:
        if getattr(theirs, name, None) != getattr(mine, name):
            return f"field {name!r}"
    return "fields equal, types differ"
