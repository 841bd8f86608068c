"""Reading one ``NAME.computeShader/`` folder: ``bindings.yaml`` plus exactly one ``.wgsl``.

An asset's files are read only when they resolve inside the asset root (a symlink to a file
elsewhere, like ``/etc/passwd`` or another checkout, is refused before a byte of it is read,
so nothing of it can reach an error message or a log), only when they are regular files (a
FIFO would block the reader for ever), and only up to :data:`MAX_ASSET_FILE_BYTES`.

The body's ``#import NAME`` lines are resolved here too (transitively; see
:mod:`engine_plugin.lowering.modules`): ``NAME.wgsl`` is looked up in the module search path,
the ``modules/`` folder of each folder above the asset up to the asset root (nearest first),
then any folders the caller adds. Module files are read under the same rules as the asset's.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Sequence

from ..errors import AssetError, Span
from ..files import shown_path
from ..lowering.modules import Module, resolve_imports

__all__ = [
    "real_path",
    "under_root",
    "AssetSource",
    "read_asset_folder",
    "find_assets",
    "link_chain",
    "path_under",
    "ASSET_SUFFIX",
    "MODULES_DIR",
    "is_editor_noise",
    "module_search_path",
    "read_modules",
]

ASSET_SUFFIX = ".computeShader"
MODULES_DIR = "modules"  # shared WGSL modules live in a folder of this name (e.g. assets/modules/)
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
    modules: tuple[Module, ...] = ()  # what the body imports, transitively, dependencies first
    module_search: tuple[str, ...] = ()  # the folders searched for modules, in order

    @property
    def content_hash(self) -> str:
        h = hashlib.sha256()
        for part in (self.yaml_text, "\0", self.wgsl_text):
            h.update(part.encode())
        for m in self.modules:  # an edited module is new content for every asset importing it
            for part in ("\0", m.name, "\0", m.path, "\0", m.text):
                h.update(part.encode())
        return h.hexdigest()

    @property
    def module_texts(self) -> dict[str, tuple[str, str]]:
        """``{name: (path, text)}`` of the imported modules, as the lowering takes them."""
        return {m.name: (m.path, m.text) for m in self.modules}


def link_chain(path: str, limit: int = 40) -> tuple[list[str], list[str]]:
    """``(spellings, links)`` of ``path``: ``path`` absolute, each link on its way (where it
    lies), and each path that names the file as those links are resolved in turn, the first
    link from the root first, down to the real path (every path a file event for it may
    name); and the links alone. A link's own path is exact (every folder before it is a real
    one); a path with a ``..`` after a link is kept only as resolved further, since
    collapsing it as text would name another file (review helper 100)."""
    spellings: list[str] = [os.path.abspath(path)]
    links: list[str] = []
    current = spellings[0]
    for _ in range(limit):
        parts = current.split(os.sep)
        for i in range(2, len(parts) + 1):
            head = os.sep.join(parts[:i])
            if os.path.islink(head):
                try:
                    target = os.readlink(head)
                except OSError:
                    return _with_real(spellings, path), links
                links.append(os.path.normpath(head))
                spellings.append(links[-1])
                current = os.path.join(os.path.dirname(head), target, *parts[i:])  # not collapsed: the OS resolves a link before its ``..``
                if _lexical(current):
                    spellings.append(os.path.normpath(current))
                break
        else:
            break
    return _with_real(spellings, path), list(dict.fromkeys(links))


def real_path(path: str) -> str:
    """``os.path.realpath`` that never raises: Python 3.11's raises FileNotFoundError when a
    link it found is removed before it reads it (a file event for a link renamed away and
    deleted logged an ERROR and dropped the event's other paths: review helper 111). A path
    gone meanwhile resolves as far as it still can."""
    try:
        return os.path.realpath(path)
    except OSError:
        whole = os.path.abspath(path)
        head, tail = os.path.split(whole)
        return whole if head == whole else os.path.join(real_path(head), tail)


def _lexical(path: str) -> bool:
    """Whether collapsing ``path``'s ``..`` as text names the file the OS would: no ``..``
    follows a link."""
    parts = path.split(os.sep)
    return all(os.sep.join(parts[:i]) == "" or not os.path.islink(os.sep.join(parts[:i])) for i, p in enumerate(parts) if p == "..")


def _with_real(spellings: list[str], path: str) -> list[str]:
    return list(dict.fromkeys([*spellings, real_path(path)]))


def path_under(path: str, top: str) -> bool:
    """Whether ``path`` is ``top`` or lies under it, as written (no link is resolved)."""
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _inside(path: str, root: str) -> bool:
    return path_under(real_path(path), real_path(root))


def _read_text(path: str, root: str) -> str:
    """The text of one asset file, read only if it is a regular file inside ``root``."""
    if not _inside(path, root):
        how = "is a symlink" if os.path.islink(path) else "lies behind a symlink"
        raise AssetError(
            f"{how} to a file outside the asset root {root}; refused (nothing was read): copy the file into the asset root, or link to a file inside it",
            Span(path),
        )
    outside = [link for link in link_chain(path)[1] if not _link_within(link, root)]
    if outside:
        # A chain that leaves the root and comes back: the watcher follows the root only, so a
        # retarget out there would leave a stale kernel live, silently (review helper 100).
        raise AssetError(
            f"reaches its file through the link {outside[0]}, outside the asset root {root}; refused: keep every link on the way inside the asset root",
            Span(path),
        )
    try:
        fd = os.open(path, _O_READ)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except OSError as exc:
        raise AssetError(f"cannot read: {exc.strerror or exc}", Span(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, device or socket?)"
            raise AssetError(f"{kind}; an asset file must be a plain text file", Span(path))
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
        text = data.decode("utf-8-sig")  # a BOM (some Windows editors write one) is not text: naga refuses it
    except UnicodeDecodeError as exc:
        # At its line and column (review helper 195: a byte offset alone), the line shown as
        # far as it decodes.
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            # A UTF-16 save (Windows tools): its lines decoded as UTF-8 are NULs and
            # replacement marks, shown as the source line (review helper 203).
            raise AssetError("UTF-16 text (its byte order mark); save the file as UTF-8", Span(path, 1, 1)) from None
        start = exc.start  # utf-8-sig counts after a BOM it took
        body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
        before = body[:start]
        line = before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1
        line_start = max(before.rfind(b"\n"), before.rfind(b"\r")) + 1
        col = len(before[line_start:].decode("utf-8", "replace")) + 1
        end = len(body) if (cut := body.find(b"\n", start)) < 0 else cut
        shown = body[line_start:end].decode("utf-8", "replace").rstrip("\r")
        raise AssetError(f"not UTF-8 text (a bad byte 0x{body[start]:02x}); save the file as UTF-8", Span(path, line, col, shown)) from None
    # As text-mode open() reads it (universal newlines): keys and line numbers stay the same.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def module_search_path(folder: str, root: str | None = None, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The folders ``#import`` looks in for an asset at ``folder``: the ``modules/`` folder of
    each folder above it, nearest first, up to ``root`` (every ancestor when None), then ``extra``.
    (:func:`read_asset_folder` of an asset on its own passes the folder holding it.)"""
    out: list[str] = []
    here = os.path.dirname(os.path.normpath(os.path.abspath(folder)))
    top = os.path.normpath(os.path.abspath(root)) if root is not None else None
    if top is not None and not path_under(here, top):
        # The root spelled through a link (--root link, or the asset named through one): the
        # folder above the asset that is the root, resolved, in the asset's own spelling; the
        # root's modules alone skipped the asset's nearer ones (review helper 114).
        real_top, up = real_path(top), here
        while real_path(up) != real_top and os.path.dirname(up) != up:
            up = os.path.dirname(up)
        if real_path(up) == real_top:
            top = up
        else:
            here = top  # an asset outside the root (a built-in one): the root's modules only
    while True:
        out.append(os.path.join(here, MODULES_DIR))
        parent = os.path.dirname(here)
        if here == top or parent == here:
            break
        here = parent
    if not os.path.isabs(folder):  # name them as the caller named the asset
        out = [os.path.relpath(p) for p in out]
    out += [os.path.normpath(e) for e in extra]
    return tuple(dict.fromkeys(out))


def _own_root(folder: str) -> str:
    """The root an asset read on its own searches ``modules/`` up to: the folder holding it,
    as ``watch`` of one asset and a library rooted there take it. Every folder up to ``/``
    compiled in modules from outside any project (a ``/tmp/modules`` file anyone can write),
    and guessing a project root from the path (the working folder, the path's first folder)
    searched outside it from some working folders and disagreed with ``bake`` of the folder
    (helpers 107, 110, 112): a command names a root further up with ``--root``."""
    return os.path.dirname(folder) or "."


def read_modules(wgsl_text: str, wgsl_path: str, search: Sequence[str], root: str | None = None) -> tuple[Module, ...]:
    """The modules ``wgsl_text`` imports, read from ``search`` (first folder holding
    ``NAME.wgsl`` wins), transitively, dependencies first.

    Args:
        root: module files must resolve inside it (default: the folder each was found in).
    Raises:
        LoweringError: an unknown module (at the ``#import`` line, listing the search path), a cycle.
        AssetError: a module file that cannot be read under the asset rules.
    """

    def find(name: str) -> tuple[str, str] | None:
        for base in search:
            path = os.path.join(base, *name.split("/")) + ".wgsl"
            if os.path.lexists(path):
                _check_utf8_name(path)
                # Inside the asset root, files stay in it; a module folder passed from outside
                # it (AssetLibrary(modules=[...])) bounds its own files.
                return path, _read_text(path, root if root is not None and under_root(base, root) else base)
        return None

    return resolve_imports(wgsl_text, wgsl_path, find, ", ".join(search) or "no module folders")


def _check_utf8_name(path: str) -> None:
    """Paths travel in lowered sources, cache entries and messages as UTF-8: a name whose bytes
    are not UTF-8 (undecodable bytes Python keeps as surrogates) is refused, named readably."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise AssetError("this path is not valid UTF-8 (its bytes name no text); rename the file or folder", Span(shown_path(path))) from None


def _link_within(link: str, root: str) -> bool:
    """Whether the link ``link`` itself (not its target) lies at or under ``root``, as written
    or with the folders above it resolved, or names the root or a folder holding it (a link
    above the root only spells the root another way: the watcher follows the root itself)."""
    where = os.path.join(real_path(os.path.dirname(link)), os.path.basename(link))
    top, real_top = os.path.abspath(root), real_path(root)
    return path_under(os.path.abspath(link), top) or path_under(where, real_top) or path_under(real_top, real_path(link))


def under_root(path: str, root: str) -> bool:
    """Whether ``path`` lies at or under ``root``, as written or resolved: a ``modules/`` link
    inside the root to a folder outside it is the root's (its files must still resolve inside
    the root), and so is a folder named through another spelling of the root (a link to it)."""
    return path_under(os.path.abspath(path), os.path.abspath(root)) or path_under(real_path(path), real_path(root))


def read_asset_folder(folder: str, root: str | None = None, modules: Sequence[str] = ()) -> AssetSource:
    """Read an asset folder (or its bindings.yaml path) and the modules its body imports.

    Args:
        folder: the ``.computeShader`` folder.
        root: the asset root the files must resolve inside (default: the folder itself).
        modules: module folders searched after the ``modules/`` folders above the asset.
    Raises:
        AssetError: no folder, no bindings.yaml, no .wgsl or more than one, unreadable files,
            files that lead outside the root, are not regular files or are too large.
        LoweringError: an ``#import`` of an unknown module, an import cycle.
    """
    folder = os.path.normpath(folder)
    if os.path.basename(folder) == "bindings.yaml":
        folder = os.path.dirname(folder) or "."
    alone = root is None  # read on its own: its root is the folder holding it (see _own_root)
    root = folder if root is None else os.path.normpath(root)
    if os.path.basename(root) == "bindings.yaml":  # a root named by its schema file
        root = os.path.dirname(root) or "."
    if not os.path.isdir(folder):
        raise AssetError(f"not a .computeShader folder ({_not_a_folder(folder)})", Span(folder))
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
    for path in (yaml_path, wgsl_path):
        _check_utf8_name(path)
    texts = [_read_text(path, root) for path in (yaml_path, wgsl_path)]
    search = module_search_path(folder, _own_root(folder) if alone else root, modules)
    # Module files must stay inside the asset root, or (an asset read on its own) inside the
    # module folder they were found in.
    mod_root = None if alone else root
    imported = read_modules(texts[1], wgsl_path, search, mod_root) if "#import" in texts[1] else ()
    return AssetSource(folder, yaml_path, texts[0], wgsl_path, texts[1], others, imported, search)


def _not_a_folder(path: str) -> str:
    """What ``path``, which is no folder, is instead (for the error naming it)."""
    if os.path.islink(path):
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "a symbolic link loop"
            return f"a symbolic link to {os.readlink(path)!r}, which does not exist"
        return f"a symbolic link to {os.readlink(path)!r}, which is not a folder"
    return "a file, not a folder" if os.path.exists(path) else "it does not exist"


def find_assets(root: str, broken: bool = False) -> list[str]:
    """Every ``*.computeShader`` folder under ``root`` (or ``root`` itself), sorted.

    ``broken``: also a ``*.computeShader`` entry that is no folder (a link to nothing, a link
    loop, a plain file), for a command to read and report: ``bake`` and ``info`` skipped one
    silently and exited 0 (review helper 195)."""
    root = os.path.normpath(root)
    if root.endswith(ASSET_SUFFIX) or os.path.basename(root) == "bindings.yaml":
        return [root]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            if d.endswith(ASSET_SUFFIX):
                out.append(os.path.join(dirpath, d))
                dirnames.remove(d)
        if broken:
            out.extend(os.path.join(dirpath, f) for f in filenames if f.endswith(ASSET_SUFFIX))
    return sorted(out)
