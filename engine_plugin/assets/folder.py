"""Reading one ``NAME.computeShader/`` folder: ``bindings.yaml`` plus exactly one ``.wgsl``.

An asset's files are read only when they resolve inside the asset root (a symlink to a file
elsewhere, like ``/etc/passwd`` or another checkout, is refused before a byte of it is read,
so nothing of it can reach an error message or a log), only when they are regular files (a
FIFO would block the reader for ever), and only up to :data:`MAX_ASSET_FILE_BYTES`.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass

from ..errors import AssetError, Span

__all__ = ["AssetSource", "read_asset_folder", "find_assets", "ASSET_SUFFIX", "is_editor_noise"]

ASSET_SUFFIX = ".computeShader"
# Files editors leave beside the real ones while saving; never part of an asset.
_NOISE_SUFFIXES = (".swp", ".swo", ".swx", "~", ".tmp", ".bak", ".orig", ".crswap")
# A kernel body or schema is kilobytes; a file this large is not one (and is not read whole).
MAX_ASSET_FILE_BYTES = 8 * 1024 * 1024
_O_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def is_editor_noise(name: str) -> bool:
    base = os.path.basename(name)
    return base == "4913" or base.startswith(".#") or base.startswith(".") or base.endswith(_NOISE_SUFFIXES)


@dataclass(frozen=True)
class AssetSource:
    """The two texts of an asset as read together, and where they came from."""

    folder: str
    yaml_path: str
    yaml_text: str
    wgsl_path: str
    wgsl_text: str
    extra_files: tuple[str, ...] = ()

    @property
    def content_hash(self) -> str:
        h = hashlib.sha256()
        for part in (self.yaml_text, "\0", self.wgsl_text):
            h.update(part.encode())
        return h.hexdigest()


def _inside(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def _read_text(path: str, root: str) -> str:
    """The text of one asset file, read only if it is a regular file inside ``root``."""
    if not _inside(path, root):
        how = "is a symlink" if os.path.islink(path) else "lies behind a symlink"
        raise AssetError(
            f"{how} to a file outside the asset root {root}; refused (nothing was read): copy the file into the asset root, or link to a file inside it",
            Span(path),
        )
    try:
        fd = os.open(path, _O_READ)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except OSError as exc:
        raise AssetError(f"cannot read: {exc.strerror or exc}", Span(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AssetError("not a regular file (a FIFO, device or socket?); an asset file must be a plain text file", Span(path))
        if st.st_size > MAX_ASSET_FILE_BYTES:
            raise AssetError(f"{st.st_size} bytes is too large for an asset file (at most {MAX_ASSET_FILE_BYTES}); is it the right file?", Span(path))
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_ASSET_FILE_BYTES + 1)
    except OSError as exc:
        raise AssetError(f"cannot read: {exc.strerror or exc}", Span(path)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_ASSET_FILE_BYTES:
        raise AssetError(f"too large for an asset file (more than {MAX_ASSET_FILE_BYTES} bytes)", Span(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AssetError(f"not UTF-8 text (a bad byte at offset {exc.start}); save the file as UTF-8", Span(path)) from None
    # As text-mode open() reads it (universal newlines): keys and line numbers stay the same.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_asset_folder(folder: str, root: str | None = None) -> AssetSource:
    """Read an asset folder (or its bindings.yaml path).

    Args:
        folder: the ``.computeShader`` folder.
        root: the asset root the files must resolve inside (default: the folder itself).
    Raises:
        AssetError: no folder, no bindings.yaml, no .wgsl or more than one, unreadable files,
            files that lead outside the root, are not regular files or are too large.
    """
    folder = os.path.normpath(folder)
    if os.path.basename(folder) == "bindings.yaml":
        folder = os.path.dirname(folder) or "."
    root = folder if root is None else os.path.normpath(root)
    if os.path.basename(root) == "bindings.yaml":  # a root named by its schema file
        root = os.path.dirname(root) or "."
    if not os.path.isdir(folder):
        raise AssetError("not a .computeShader folder (it does not exist or is not a folder)", Span(folder))
    yaml_path = os.path.join(folder, "bindings.yaml")
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise AssetError(f"cannot list the asset folder: {exc.strerror}", Span(folder)) from None
    wgsl = [n for n in names if n.endswith(".wgsl") and not is_editor_noise(n)]
    if "bindings.yaml" not in names:
        raise AssetError("the asset has no bindings.yaml (the ABI schema)", Span(folder))
    if not wgsl:
        raise AssetError("the asset has no .wgsl file (the kernel body)", Span(folder))
    if len(wgsl) > 1:
        raise AssetError(f"an asset holds exactly one .wgsl file; found {len(wgsl)}: {', '.join(wgsl)}", Span(folder))
    # Other files (notes, images) are reported by callers, not fatal: they cannot change the kernel.
    others = tuple(n for n in names if n not in ("bindings.yaml", wgsl[0]) and not is_editor_noise(n))
    wgsl_path = os.path.join(folder, wgsl[0])
    texts = [_read_text(path, root) for path in (yaml_path, wgsl_path)]
    return AssetSource(folder, yaml_path, texts[0], wgsl_path, texts[1], others)


def find_assets(root: str) -> list[str]:
    """Every ``*.computeShader`` folder under ``root`` (or ``root`` itself), sorted."""
    root = os.path.normpath(root)
    if root.endswith(ASSET_SUFFIX) or os.path.basename(root) == "bindings.yaml":
        return [root]
    out = []
    for dirpath, dirnames, _ in os.walk(root):
        for d in list(dirnames):
            if d.endswith(ASSET_SUFFIX):
                out.append(os.path.join(dirpath, d))
                dirnames.remove(d)
    return sorted(out)
