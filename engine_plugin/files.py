"""The one atomic file writer: a reader (a build system, another process baking into the same
cache) sees the old file or the new one, never half of one.

Ground floor: the standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from typing import Any

__all__ = ["json_text", "printable", "shown_path", "write_atomic"]


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` for a terminal: control characters (an ESC in a file name would drive the
    terminal: review helper 128) spelled ``\\x1b``; tabs and newlines kept (a carriage return,
    which could overwrite the line shown, is spelled out too)."""
    return _CONTROL.sub(_spelled, text)


def _spelled(m: re.Match) -> str:
    code = ord(m.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte no UTF-8 holds, kept as a surrogate (0x9b is a terminal's CSI)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if code > 0xFF else f"\\x{code:02x}"


def shown_path(path: str) -> str:
    """``path`` as a message shows it: bytes that are not UTF-8 (kept by Python as surrogates,
    which print as ``\\udcff``) spelled ``\\xff``, as the file's own name shows them."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        pass
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name decodes to (text read as '\ud800')
        return path.encode("utf-8", "backslashreplace").decode("utf-8")


def json_text(data: Any, indent: int | None = None) -> str:
    """``data`` as JSON text, every string spelled as :func:`shown_path` spells a path: a name
    that is not UTF-8 would otherwise be a lone surrogate (``\\udcff``), which strict JSON
    readers refuse, beside its ``\\xff`` spelling in the same object (review helper 110)."""
    return json.dumps(_shown_strings(data), indent=indent)


def _shown_strings(data: Any) -> Any:
    if isinstance(data, str):
        return shown_path(data)
    if isinstance(data, dict):
        return {_shown_strings(k): _shown_strings(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_shown_strings(v) for v in data]
    return data


def write_atomic(path: str, data: bytes, *, temp_prefix: str = ".engine-plugin-", stamp_ns: int | None = None, mode: int = 0o644) -> None:
    """Write ``data`` to a fresh temporary file beside ``path``, fsync it, then rename it over
    ``path``. The temporary file's name starts with ``temp_prefix`` (so a sweep can tell it);
    ``stamp_ns`` sets its times before the rename.

    Raises:
        OSError: nothing was replaced (the temporary file is gone too).
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f"{temp_prefix}{os.path.basename(path)[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if stamp_ns is not None:
            os.utime(tmp, ns=(stamp_ns, stamp_ns))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
