"""A model-based fuzzer of the engine's delivery (issue 14), checked against numpy.

One :class:`Sequence` drives a small world and an engine on the real device (lavapipe) through
seeded random steps: world edits (also from inside ``apply`` callbacks), evictions, re-adds,
register/unregister, hot reloads of a real asset in a temporary folder (body edits and layout
edits, some of which break the product contract and are refused), refused uploads, work past
the dispatch and readback bounds, failing readbacks, device errors and recovery. Every step
ends with ``engine.frame()``.

The model is independent of the engine: every mutation goes through :meth:`Sequence._mutate`,
which snapshots the chunk's content under its new version. Each applied result is checked:

* **stale**: its values equal numpy's on the snapshot of the version it names (for the
  reloadable kernel, any bias the asset's text ever had, 0 from the CPU);
* **duplicate**: no (registration, generation, source, chunk, version) is applied again while it is the chunk's latest;
* **lost without report / liveness**: once edits stop (and the GPU is recovered), within
  ``K`` frames the engine is idle and every live chunk of every product has a result at its
  current version; a product may instead show its failure (``engine.idle`` false and
  ``product.error``), which the check reports as such.

What lavapipe cannot do on purpose is injected at the backend boundary only: an upload refusal
(``backend.upload`` answers False) and a failing map (the readback waiter reports an error).

**Mid-frame edits** stand for another thread changing the world while a frame runs (outside
the single-threaded contract, which must still never yield a wrong number or a chunk left
wrong): a one-shot hook edits, evicts or adds a chunk at a chosen moment inside the frame,
before a field's take, inside one (between reading and clearing its dirty flags), after a
span's write, or at the n-th chunk lookup. A frame may then raise ``StaleSpanError`` (a span
went stale mid-upload: the next frame sends it), nothing else.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine_plugin.engine import Engine, EngineConfig, ProductError, fallbacks, kernel_program
from engine_plugin.errors import StaleSpanError
from engine_plugin.gpu import ReadbackPolicy, WgpuBackendConfig
from engine_plugin.world import World

SHAPE = (4, 4)
TILES = 16
ASSET = "engine/summary.computeShader"
K_FRAMES = 400  # liveness: at least this many frames once edits stop (readbacks land within a few ms each)
LIVE_SECONDS = 30.0  # ... and at least this long: on a loaded machine the GPU may need more than 400 fast frames


class HookWorld(World):
    """A World with one armed hook: ``(point, countdown, edit)`` runs ``edit`` at the
    ``countdown``-th time the frame reaches ``point`` ("take", "inside_take", "contains", or
    "write", reached by the backend's queue wrapper; "contains" only in ContainsHookWorld)."""

    armed: tuple[str, int, Any] | None = None

    def fire(self, point: str) -> None:
        armed = self.armed
        if armed is None or armed[0] != point:
            return
        if armed[1] > 1:
            self.armed = (point, armed[1] - 1, armed[2])
            return
        self.armed = None
        armed[2]()

    def take_dirty_slots(self, name: str) -> np.ndarray:
        self.fire("take")
        if self.armed is None or self.armed[0] != "inside_take":
            return super().take_dirty_slots(name)
        mask = self._dirty_mask[name]  # World.take_dirty_slots, with the edit in its middle
        slots = mask.nonzero()[0]
        self.fire("inside_take")
        mask.fill(False)
        return slots


class ContainsHookWorld(HookWorld):
    """A HookWorld whose ``in`` is a hook point too ("contains"). Overriding ``__contains__``
    makes the engine read its work lists chunk by chunk (``ChunkIndex`` reads the vectors of a
    World only): half of the sequences use this class, half the vector path."""

    def __contains__(self, key: object) -> bool:
        self.fire("contains")
        return super().__contains__(key)


class _WriteHook:
    """The backend's queue: each ``write_buffer`` is sent, then reaches the world's "write" hook."""

    def __init__(self, queue: Any, world: HookWorld) -> None:
        self.queue, self.world = queue, world

    def write_buffer(self, *args: Any) -> None:
        self.queue.write_buffer(*args)
        self.world.fire("write")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)


@dataclass
class Report:
    steps: int = 0
    frames: int = 0
    applied: int = 0
    stale: list = field(default_factory=list)
    duplicates: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    not_live: list = field(default_factory=list)
    events: dict = field(default_factory=dict)

    def note(self, what: str) -> None:
        self.events[what] = self.events.get(what, 0) + 1

    def add(self, other: Report) -> None:
        for name in ("steps", "frames", "applied"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("stale", "duplicates", "lost", "not_live"):
            getattr(self, name).extend(getattr(other, name))
        for k, v in other.events.items():
            self.events[k] = self.events.get(k, 0) + v


class _FlakyMaps:
    """Stands in for the readback waiter's queue: while ``failing``, every map reports an error."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failing = False

    def put(self, item: Any) -> None:
        self.inner.put((item[0], RuntimeError("injected map failure")) if self.failing else item)

    def get_nowait(self) -> Any:
        return self.inner.get_nowait()


class Asset:
    """The reloadable kernel's two files in a temporary folder, and the biases it ever had."""

    def __init__(self, root: str, library: Any) -> None:
        self.library = library
        folder = os.path.join(root, ASSET)
        self.kernel = os.path.join(folder, "kernel.wgsl")
        self.yaml = os.path.join(folder, "bindings.yaml")
        self.kernel_text = open(self.kernel).read()
        self.yaml_text = open(self.yaml).read()
        self.biases = {0}
        self.bias = 0
        self.extra_param = False
        self.broken = False

    def write(self, rng: random.Random) -> str:
        kind = rng.choice(["body", "body", "body", "layout", "layout", "break", "fix", "fix"])
        if kind == "body":
            self.bias = rng.randrange(0, 4)
            self.biases.add(self.bias)
        elif kind == "layout":
            self.extra_param = not self.extra_param  # an engine-filled param more or less: a new params layout
        elif kind == "break":
            self.broken = True  # the work list renamed: outside the product contract, refused
        else:
            self.broken = False
        text = self.kernel_text.replace("sum * params.inv_tile_count, sum)", f"sum * params.inv_tile_count + {self.bias}.0, sum)")
        yaml = self.yaml_text
        if self.extra_param:
            yaml = yaml.replace("  - { name: inv_tile_count, type: f32 }", "  - { name: inv_tile_count, type: f32 }\n  - { name: slot_count, type: u32 }")
        if self.broken:
            yaml = yaml.replace("name: chunks,", "name: slots,")
            text = text.replace("chunks_get", "slots_get")
        with open(self.kernel, "w") as f:
            f.write(text)
        with open(self.yaml, "w") as f:
            f.write(yaml)
        self.library.request_reload(ASSET)
        deadline = time.monotonic() + 10
        while self.library.pending == 0 and not self.library.idle and time.monotonic() < deadline:
            time.sleep(0.002)
        return kind


class Sequence:
    """One seeded run over a fresh world and engine; answers a :class:`Report`."""

    def __init__(self, seed: int, device: Any, asset: Asset, steps: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.asset = asset
        self.steps = steps
        self.report = Report()
        self.world = (ContainsHookWorld if seed % 2 else HookWorld)(SHAPE, {"h": np.float32, "g": np.float32}, max_chunks=10)
        self.snap: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        self.next_key = 0
        for _ in range(6):
            self._add()
        cfg = WgpuBackendConfig(max_chunks_per_dispatch=self.rng.choice([2, 3, 64]), max_inflight_readbacks=self.rng.choice([2, 16]),
                                max_inflight_readback_bytes=16 * self.rng.choice([3, 4, 1000]))
        self.engine = Engine(self.world, asset.library, config=EngineConfig(backend=cfg), device=device)
        self.editing = True
        self.seen: dict = {}  # (product, registration, chunk) -> the ident applied last
        self.latest: dict[tuple[str, int], tuple[int, int]] = {}  # (product, chunk) -> (version, registration)
        self.registration = 0
        self.handles: dict[str, Any] = {}
        self.refusing = False
        self.flaky: _FlakyMaps | None = None
        self._wrapped: Any = None
        for name in ("ref", "prog", "cpu"):
            self._register(name)

    # ---- the model -----------------------------------------------------------------------
    def _record(self, key: int) -> None:
        self.snap[(key, self.world.version(key))] = {n: self.world.read(key, n).copy() for n in ("h", "g")}

    def _values(self) -> dict[str, np.ndarray]:
        r = self.rng
        return {"h": np.array([[r.randrange(16) for _ in range(4)] for _ in range(4)], np.float32),
                "g": np.full(SHAPE, r.randrange(16), np.float32)}

    def _add(self) -> None:
        free = [k for k in range(self.next_key + 1) if k not in self.world]
        if len(self.world) >= self.world.max_chunks:
            return
        key = self.rng.choice(free) if free and self.rng.random() < 0.5 else self.next_key
        if key == self.next_key:
            self.next_key += 1
        if key in self.world:
            return
        self.world.add(key, self._values())
        self._record(key)

    def _mutate(self) -> None:
        keys = self.world.keys()
        if not keys:
            return self._add()
        key = self.rng.choice(keys)
        what = self.rng.random()
        if what < 0.4:
            self.world.set_tile(key, "h", (self.rng.randrange(4), self.rng.randrange(4)), float(self.rng.randrange(16)))
        elif what < 0.7:
            self.world.write(key, "g", float(self.rng.randrange(16)))
        else:
            self.world.write(key, "h", self._values()["h"])
        self._record(key)

    def _edit_mid_frame(self) -> None:
        """The other thread's change, inside a frame: an edit, an eviction or an add."""
        what = self.rng.random()
        keys = self.world.keys()
        if what < 0.15 and keys:
            self.world.evict(self.rng.choice(keys))
        elif what < 0.3:
            self._add()
        else:
            self._mutate()

    # ---- products ------------------------------------------------------------------------
    def _apply_for(self, name: str, registration: int) -> Any:
        def apply(result: Any) -> None:
            self._check(name, registration, result)
            if self.editing and name == "prog" and self.rng.random() < 0.3:
                self._mutate()  # a game reacting to a result, inside the frame

        return apply

    def _register(self, name: str) -> None:
        self.registration += 1
        reg = self.registration
        apply = self._apply_for(name, reg)
        engine = self.engine
        if name == "ref":
            try:
                h = engine.register_product(ASSET, key=name, spec={"T": "f32"}, fields={"src": "h"}, apply=apply, cpu_fallback=fallbacks.summary)
            except ProductError:  # the asset's live text is outside the contract just now
                self.report.note("register_refused")
                return
        elif name == "prog":
            h = engine.register_product(kernel_program("summary"), key=name, fields={"src": "g"}, apply=apply,
                                        cpu_fallback=fallbacks.summary, policy=ReadbackPolicy.SUMMARY)
        else:
            def total(w: Any, work: Any) -> np.ndarray:
                return np.array([w.read(k, "h").sum() for k in work.keys], np.float32)

            h = engine.register_product(None, key=name, fields=["h"], cpu_fallback=total, apply=apply)
        self.handles[name] = (h, reg)

    def _check(self, name: str, registration: int, result: Any) -> None:
        rep = self.report
        values = result.values
        for i, (k, v) in enumerate(zip(result.keys, result.versions)):
            rep.applied += 1
            ident = (name, registration, result.generation, result.source, k, v)
            # A duplicate is a result applied again while it is the chunk's latest: the same
            # CPU result again after a GPU result in between restores it (helper 73's case).
            if self.seen.get((name, registration, k)) == ident:
                rep.duplicates.append((self.seed, ident))
            self.seen[(name, registration, k)] = ident
            snap = self.snap.get((k, v))
            if snap is None or not self.world.is_current(k, v):
                rep.stale.append((self.seed, name, k, v, "not current when applied"))
                continue
            field = "g" if name == "prog" else "h"
            data = snap[field].astype(np.float32)
            total = float(data.sum())
            if name == "cpu":
                ok = float(values[i]) == total
            else:
                rec = values[i]
                bias = float(rec[2]) - total / TILES
                biases = self.asset.biases if (name == "ref" and result.source == "gpu") else {0}
                ok = float(rec[0]) == data.min() and float(rec[1]) == data.max() and float(rec[3]) == total and bias in biases
            if not ok:
                rep.stale.append((self.seed, name, k, v, result.source, np.asarray(values[i]).tolist(), total))
            self.latest[(name, k)] = (v, registration)

    # ---- injected faults at the backend boundary -------------------------------------------
    def _wrap_backend(self) -> None:
        backend = self.engine.backend
        if backend is self._wrapped or not hasattr(backend, "_ring"):
            return
        self._wrapped = backend
        real = backend.upload

        def upload(desc: Any) -> bool:
            if self.refusing:
                backend.last_refusal = "injected upload refusal"
                return False
            return real(desc)

        backend.upload = upload
        backend.queue = _WriteHook(backend.queue, self.world)
        self.flaky = _FlakyMaps(backend._ring.waiter.done)
        backend._ring.waiter.done = self.flaky

    # ---- the run -------------------------------------------------------------------------
    def step(self) -> None:
        r, engine, rep = self.rng, self.engine, self.report
        self._wrap_backend()
        self.refusing = False
        x = r.random()
        if x < 0.35:
            for _ in range(r.randrange(1, 4)):
                self._mutate()
        elif x < 0.45:
            keys = self.world.keys()
            if keys:
                self.world.evict(r.choice(keys))
                rep.note("evict")
        elif x < 0.55:
            self._add()
            rep.note("add")
        elif x < 0.60:
            name = r.choice(["ref", "prog", "cpu"])
            if name in self.handles:
                engine.unregister_product(self.handles.pop(name)[0])
                self.latest = {k: v for k, v in self.latest.items() if k[0] != name}
                rep.note("unregister")
            else:
                self._register(name)
                rep.note("register")
        elif x < 0.64:
            rep.note("reload:" + self.asset.write(r))
        elif x < 0.68:
            self.refusing = True  # this frame's uploads are refused
            self._mutate()
            rep.note("refused_uploads")
        elif x < 0.70 and self.flaky is not None:
            self.flaky.failing = not self.flaky.failing
            rep.note("maps_failing" if self.flaky.failing else "maps_ok")
        elif x < 0.72:
            if engine.gpu_active:
                engine.backend.notify_device_error("fuzzer: device error")
                rep.note("device_error")
            else:
                engine.recover_gpu()
                rep.note("recover")
        elif x < 0.80:
            self._mutate()  # something for the frame to take
            point = r.choice(["take", "inside_take", "contains" if isinstance(self.world, ContainsHookWorld) else "take", "write"])
            self.world.armed = (point, r.randrange(1, 4), self._edit_mid_frame)
            rep.note("mid_frame:" + point)
        try:
            engine.frame()
        except StaleSpanError:
            rep.note("stale_span")  # a span went stale mid-upload: its chunks are dirty again
        self.world.armed = None  # not reached this frame: disarmed
        rep.steps += 1
        rep.frames += 1

    def quiesce(self) -> None:
        """Edits stop; the GPU comes back; within K frames everything is current (or visibly not)."""
        self.editing = False
        self.refusing = False
        if self.flaky is not None:
            self.flaky.failing = False
        if not self.engine.gpu_active:
            self.engine.recover_gpu()
        self._wrap_backend()
        if self.flaky is not None:
            self.flaky.failing = False
        deadline = time.monotonic() + LIVE_SECONDS
        for frame in itertools.count():
            if frame >= K_FRAMES and time.monotonic() > deadline:
                break
            self.engine.frame()
            self.report.frames += 1
            if self.engine.idle and getattr(self.engine.backend, "inflight_readbacks", 0) == 0:
                break
            time.sleep(0.001)
        rep = self.report
        if not self.engine.idle:
            rep.not_live.append((self.seed, repr(self.engine), [(p.key, sorted(p.pending), p.inflight, p.error) for p in map(self.engine.product, self.engine.products())]))
            return
        for name, (h, reg) in self.handles.items():
            field = "g" if name == "prog" else "h"
            for k in self.world.keys():
                got = self.latest.get((name, k))
                # Current: computed from this registration, from the content the chunk's field
                # has now (a change to a field the product does not read owes it nothing).
                if got is None or got[1] != reg or not np.array_equal(self.snap[(k, got[0])][field], self.world.read(k, field)):
                    rep.lost.append((self.seed, name, k, self.world.version(k), got, self.engine.product(h).error))

    def run(self) -> Report:
        try:
            for _ in range(self.steps):
                self.step()
            self.quiesce()
        finally:
            self.engine.close()
        return self.report
