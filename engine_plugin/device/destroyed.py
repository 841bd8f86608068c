"""Buffers and textures their owner destroyed, known before anything binds them.

wgpu-native treats a submission that uses a destroyed buffer or texture as fatal: it panics
inside ``wgpuQueueSubmit`` and aborts the process (wgpu-py 0.32 has no error scope around a
submit, and the panic cannot be caught). wgpu-py keeps no destroyed state either, so
:func:`install` wraps ``destroy()`` of both classes once to mark the object and bump
:data:`EPOCH`. A run refuses a marked object it was handed (a ``DispatchError`` naming the
binding), and a remembered call's fast path compares :data:`EPOCH` to know nothing it bound
was destroyed since it was checked.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["EPOCH", "install", "is_destroyed", "register_holder_lookup", "unusable", "unusable_binding"]

_MARK = "_engine_plugin_destroyed"
_BOUND = "_engine_plugin_bound"  # on a bind group: the buffers and textures it binds
EPOCH = [0]  # bumped by every destroy(): a remembered binding's checks hold while it is unchanged
_lock = threading.Lock()
_installed = [False]


# Each answers the callback lists of every holder of recorded, not yet submitted work that uses
# an object (open batches: each runs its list once submitted): the runtime registers them.
_holders: list[Callable[[Any], list[list]]] = []


def register_holder_lookup(find: Callable[[Any], list[list]]) -> None:
    """Let ``destroy()`` of an object that recorded, unsubmitted work uses wait for all of it:
    ``find(obj)`` answers one callback list per holder, each run once that holder submitted."""
    _holders.append(find)


def is_destroyed(obj: Any) -> bool:
    """Whether ``destroy()`` was called on this buffer or texture."""
    return getattr(obj, _MARK, False) is True


def unusable(obj: Any) -> str | None:
    """Why a submission using this buffer or texture would abort the process, as the end of
    a sentence naming it ("was destroyed ...", "is still mapped ..."), or None. A buffer
    mapped (at creation, or by ``map_async``) and not unmapped makes wgpu-native panic inside
    ``wgpuQueueSubmit`` as a destroyed one does (review helper 189)."""
    if getattr(obj, _MARK, False) is True:
        return "was destroyed (destroy() was called on it)"
    state = getattr(obj, "map_state", None)  # a GPUBuffer's; a texture has none (nor a test double: not a str)
    if isinstance(state, str) and state != "unmapped":
        return f"is still mapped (map state {state!r}): unmap() it before the GPU uses it"
    return None


def unusable_binding(group: Any) -> Any | None:
    """A buffer or texture the bind group ``group`` binds that :func:`unusable` refuses
    (None: none, or a group made before :func:`install`). A caller-made product's group holds
    buffers the backend cannot see otherwise: submitting it after one was destroyed aborted
    the process (review helper 159), and so did one still mapped (189)."""
    for obj in getattr(group, _BOUND, ()):
        if unusable(obj) is not None:
            return obj
    return None


def _noting(create: Any) -> Any:
    def create_bind_group(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Materialised first: a generator of entries would be used up by wgpu-py (review
        # helper 160); entries and buffer bindings may be any mapping (wgpu.BindGroupEntry,
        # wgpu.BufferBinding) or an object with those attributes.
        entries = kwargs.get("entries")
        if entries is not None and not isinstance(entries, (list, tuple)):
            kwargs["entries"] = entries = list(entries)
        group = create(self, *args, **kwargs)
        bound = []
        for entry in entries or ():
            resource = _field(entry, "resource")
            buffer = _field(resource, "buffer")
            if buffer is not None:
                resource = buffer
            target = getattr(resource, "texture", resource)  # a texture view binds its texture
            if target is not None and hasattr(target, "destroy"):
                bound.append(target)
        try:
            setattr(group, _BOUND, tuple(bound))
        except AttributeError:  # a class with __slots__: nothing noted, nothing checked
            pass
        return group

    create_bind_group.__wrapped__ = create  # type: ignore[attr-defined]
    create_bind_group.__doc__ = create.__doc__
    return create_bind_group


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, else its attribute ``name``, else None."""
    if obj is None:
        return None
    try:
        return obj[name] if hasattr(obj, "keys") else getattr(obj, name, None)
    except (KeyError, TypeError):
        return None


def _marking(destroy: Any) -> Any:
    def marked_destroy(self: Any) -> None:
        try:
            setattr(self, _MARK, True)
        except AttributeError:  # a class with __slots__: nothing to mark, nothing refused
            pass
        EPOCH[0] += 1
        waits = [after for find in _holders for after in find(self)]
        if not waits:
            destroy(self)
            return
        # Recorded work uses it (open batches, perhaps nested or on other threads): destroyed
        # once the last of them is submitted (WebGPU lets submitted work finish); new runs
        # refuse it from now on.
        left = [len(waits)]
        lock = threading.Lock()

        def one_submitted() -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                destroy(self)

        for after in waits:
            after.append(one_submitted)

    marked_destroy.__wrapped__ = destroy  # type: ignore[attr-defined]
    marked_destroy.__doc__ = destroy.__doc__
    return marked_destroy


def install() -> None:
    """Wrap wgpu-py's ``GPUBuffer.destroy`` and ``GPUTexture.destroy`` (once a process)."""
    with _lock:
        if _installed[0]:
            return
        import wgpu.backends.wgpu_native as native

        for cls in (native.GPUBuffer, native.GPUTexture):
            destroy = cls.__dict__.get("destroy")
            if destroy is not None and not hasattr(destroy, "__wrapped__"):
                cls.destroy = _marking(destroy)
        create = native.GPUDevice.__dict__.get("create_bind_group")
        if create is not None and not hasattr(create, "__wrapped__"):
            native.GPUDevice.create_bind_group = _noting(create)
        _installed[0] = True
