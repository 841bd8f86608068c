"""A product's record of what it sent (the content version a chunk's work was sent for, and
that work's serial) is kept by slot, as vectors, while every work carries its slots, and by
chunk key otherwise. Both must owe exactly the same chunks: a random sequence of world edits,
evictions, additions, sent work lists, owed changes and re-owed (failed or stale) results,
played on a product of each kind, must leave them owing the same chunks at every step. The
by-slot product switches to the dict midway in some sequences (a work without slots)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine_plugin.engine.products import ChunkIndex, Product, Work
from engine_plugin.gpu.descriptors import ReadbackPolicy
from engine_plugin.world import World

SLOTS = 12


def _product() -> Product:
    return Product(
        key="p", policy=ReadbackPolicy.SUMMARY, fields="h", apply=None, cpu_fallback=None, params={}, ref=None, program=None, spec=None, columns=None
    )


def _work(product: Product, world: World, keys: set[int] | None, with_slots: bool) -> Work:
    work = product.work(world, keys=keys, index=ChunkIndex(world))
    if not with_slots:
        work = Work(work.keys, work.versions, work.items)  # as a work list without slots
    return work


# Weighted: the interesting sequences edit, send and owe the same chunks before a change of
# record (to_dict) makes both products keep the same dict.
_NAMES = ["edit"] * 5 + ["send"] * 4 + ["owe"] * 4 + ["evict", "add", "fail", "stale"] * 2 + ["to_dict"]
op = st.tuples(st.sampled_from(_NAMES), st.integers(0, SLOTS + 3))


@settings(max_examples=400, deadline=None)
@given(st.lists(op, min_size=1, max_size=40), st.integers(0, 2**32 - 1))
@example([("edit", 1), ("send", 0), ("owe", 1)], 1)  # owed by versions without slots
@example([("edit", 1), ("send", 1), ("to_dict", 0), ("owe", 1)], 1)  # sent before the switch to the dict
@example([("edit", 1), ("send", 0), ("fail", 0), ("send", 0), ("fail", 0)], 1)  # re-owed by a failed work's serial
@example([("send", 0), ("edit", 1), ("stale", 0)], 1)  # a stale result re-owes the chunk's new content
@example([("send", 0), ("evict", 1), ("edit", 0), ("stale", 0)], 1)  # ... and nothing for an evicted chunk
def test_the_by_slot_sent_record_owes_what_the_by_key_record_owes(ops, seed):
    rng = np.random.default_rng(seed)
    world = World((2, 2), {"h": np.float32}, max_chunks=SLOTS)
    for k in range(SLOTS - 4):
        world.add(k)
    by_slot, by_key = _product(), _product()
    by_slot.owe_everything(world)
    by_key.owe_everything(world)
    by_key._sent_at = by_key._sent_serial = None  # the by-key record from the start
    assert by_slot._sent_at is not None
    sent: list[tuple[Work, Work]] = []  # works on their way, one of each product
    changed: list[int] = []
    for name, arg in ops:
        if name == "edit" and arg in world:
            world.write(arg, "h", float(rng.random()))
            changed.append(arg)
        elif name == "evict" and arg in world:
            world.evict(arg)
        elif name == "add" and arg not in world and len(world) < SLOTS:
            world.add(arg)
            changed.append(arg)
        elif name == "send" and by_slot.pending:
            owed = sorted(by_slot.pending)
            keys = set(owed[: max(1, len(owed) // (arg % 4 + 1))])
            with_slots = not (arg == 3 and by_slot._sent_at is not None and rng.random() < 0.3)
            a = _work(by_slot, world, keys, with_slots)
            b = _work(by_key, world, keys, True)
            assert a.keys == b.keys
            if a:
                by_slot.done(a)
                by_key.done(b)
                sent.append((a, b))
        elif name == "owe" and changed:
            index = ChunkIndex(world)
            live = [k for k in dict.fromkeys(changed) if k in world]
            slots = np.array([world.slot(k) for k in live], dtype=np.int64)
            versions = world.slot_versions(slots)
            if arg % 3 == 0:  # the uploader's vectors
                by_slot.owe_changed(live, index.get, versions, slots)
                by_key.owe_changed(live, index.get, versions, slots)
            elif arg % 3 == 1:  # versions, no slots
                by_slot.owe_changed(live, index.get, versions)
                by_key.owe_changed(live, index.get, versions)
            else:  # keys only (evicted keys too)
                keys = list(dict.fromkeys(changed))
                by_slot.owe_changed(keys, index.get)
                by_key.owe_changed(keys, index.get)
            changed.clear()
        elif name in ("fail", "stale") and sent:
            a, b = sent.pop(arg % len(sent))
            if name == "fail":
                by_slot.reowe(world, a.keys, failed=a)
                by_key.reowe(world, b.keys, failed=b)
            else:
                stale = [k for k, v in zip(a.keys, a.versions) if not world.is_current(k, v)]
                by_slot.reowe(world, stale)
                by_key.reowe(world, stale)
        elif name == "to_dict" and by_slot._sent_at is not None and by_slot.pending:
            a = _work(by_slot, world, None, with_slots=False)
            b = _work(by_key, world, None, True)
            if a:
                by_slot.done(a)
                by_key.done(b)
                sent.append((a, b))
        assert by_slot.pending == by_key.pending, (name, arg)


def _sent_everything() -> tuple[World, Product]:
    """Six chunks in eight slots, and a product that sent a work list over all of them."""
    world = World((2, 2), {"h": np.float32}, max_chunks=8)
    for k in range(6):
        world.add(k)
    product = _product()
    product.owe_everything(world)
    product.done(product.work(world, index=ChunkIndex(world)))
    return world, product


def test_sending_a_work_list_records_it_by_slot_without_the_dict():
    world, product = _sent_everything()
    assert product.sent == {}  # nothing per chunk on the frame's path
    assert product._sent_at is not None
    assert product._sent_at[world.slot(3)] == world.version(3)
    world.write(3, "h", 1.0)
    index = ChunkIndex(world)
    product.owe_changed([2, 3], index.get)  # 2 is unchanged: its sent version is current
    assert product.pending == {3}


def test_re_owing_takes_keys_as_any_iterable():
    world, product = _sent_everything()
    world.write(3, "h", 1.0)
    forms = {"array": lambda: np.array([2, 3]), "generator": lambda: (k for k in (2, 3)), "set": lambda: {2, 3}, "list": lambda: [2, 3]}
    for name, make_keys in forms.items():
        product.pending = set()
        product.reowe(world, make_keys())
        assert product.pending == {3}, name  # 3 changed since it was sent; 2 did not
    product.pending = set()
    product.reowe(world, ())
    assert product.pending == set()
