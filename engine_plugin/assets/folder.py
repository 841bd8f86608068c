"""Reading one ``NAME.computeShader/`` folder: ``bindings.yaml`` plus exactly one ``.wgsl``."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from ..errors import AssetError, Span

__all__ = ["AssetSource", "read_asset_folder", "find_assets", "ASSET_SUFFIX", "is_editor_noise"]

ASSET_SUFFIX = ".computeShader"
# Files editors leave beside the real ones while saving; never part of an asset.
_NOISE_SUFFIXES = (".swp", ".swo", ".swx", "~", ".tmp", ".bak", ".orig", ".crswap")


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


def read_asset_folder(folder: str) -> AssetSource:
    """Read an asset folder (or its bindings.yaml path).

    Raises:
        AssetError: no folder, no bindings.yaml, no .wgsl or more than one, unreadable files.
    """
    folder = os.path.normpath(folder)
    if os.path.basename(folder) == "bindings.yaml":
        folder = os.path.dirname(folder) or "."
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
    texts = []
    for path in (yaml_path, wgsl_path):
        try:
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
        except (OSError, UnicodeDecodeError) as exc:
            raise AssetError(f"cannot read: {exc}", Span(path)) from None
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
