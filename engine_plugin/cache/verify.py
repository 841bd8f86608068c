"""Verifying an entry that came from somewhere this process does not trust (the remote tier).

A checksum proves only that the bytes were not damaged: anyone who can write the server can
recompute it. What a client can prove on its own is that the entry is what *its* asset text
lowers to: the key derives from the texts it holds, and lowering is pure, so it lowers the
variant again and compares. Self-contained on purpose (issue 19 verifies bake-worker results
the same way; the two can share this function).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import replace

from ..lowering import Lowered, Schema, VariantSpec, lower
from ..lowering.fingerprint import variant_key
from ..lowering.modules import ModuleTexts, from_mapping, resolve_imports
from ..lowering.wgsl_text import lf_breaks
from .entry import BadEntry, Entry, open_entry

__all__ = ["BadSignature", "verify_entry", "sign", "split_signed", "SIGNED_MAGIC"]

# A signed value on the server: magic, 32 bytes of HMAC-SHA256 over the entry, the entry.
SIGNED_MAGIC = b"EPSIG1\n"
_MAC_LEN = 32


class BadSignature(BadEntry):
    """A signed value whose HMAC does not hold under this client's secret: forged, or (most
    often) signed under another secret, e.g. before a rotation."""


def sign(secret: bytes, entry: bytes) -> bytes:
    """The server value of ``entry`` signed with the studio's shared ``secret``."""
    return SIGNED_MAGIC + hmac.new(secret, entry, hashlib.sha256).digest() + entry


def split_signed(value: bytes) -> tuple[bytes | None, bytes]:
    """(mac or None when the value is not signed, entry bytes)."""
    if value.startswith(SIGNED_MAGIC) and len(value) > len(SIGNED_MAGIC) + _MAC_LEN:
        at = len(SIGNED_MAGIC)
        return value[at : at + _MAC_LEN], value[at + _MAC_LEN :]
    return None, value


# The lowered source opens with one comment naming the files it was lowered from (the
# baker's paths); any character WGSL takes as a line break would end that comment early.
_HEADER = "// engine_plugin: lowered from "
_WGSL_BREAKS = ("\r", "\v", "\f", "\x85", "\u2028", "\u2029")


def _body(source: str) -> str | None:
    """The source after its header comment; None when the first line is not that comment."""
    head, sep, rest = source.partition("\n")
    if not head.startswith(_HEADER) or not sep or any(c in head for c in _WGSL_BREAKS):
        return None
    return rest


def _same_lowering(entry: Lowered, reference: Lowered) -> bool:
    # The entry names the baker's files (in its header comment and source map); everything
    # else (every line the GPU compiles, bindings, params, slots, the line map, the texts the
    # carets quote) must be exactly what this client lowers.
    body = _body(entry.source)
    if body is None or body != _body(reference.source):
        return False
    rebased = replace(
        entry, source=reference.source, asset=reference.asset, source_map=replace(entry.source_map, files=reference.source_map.files)
    )
    return rebased == reference


def verify_entry(
    key: str,
    value: bytes,
    *,
    schema: Schema,
    wgsl: str,
    spec: VariantSpec,
    wgsl_path: str | None = None,
    secret: bytes | None = None,
    modules: ModuleTexts | None = None,
) -> tuple[Entry, str]:
    """The lowered variant held in ``value`` once it is proven to be ``spec`` of this asset.

    Checks, in order: the key re-derived from the client's own ``schema.text``, ``wgsl`` and
    ``spec`` equals ``key``; the entry decodes (magic, cache format, lowering version, layout,
    its own key, the checksum); its spec is ``spec``. Then either its HMAC under ``secret``
    holds (a value signed by a trusted baker; answered as ``"signed"``), or the variant is
    lowered again here and must equal the entry in everything but the file paths (answered
    as ``"relowered"``). An unsigned value is always re-lowered, and so is every value when
    ``secret`` is None or empty; a signed one whose MAC does not hold under ``secret`` is
    refused.

    Returns:
        (the Entry to serve, how it was proven): the entry's own when "signed" (with its bake's
        mark that a device compiled it); this client's own lowering, unmarked, when
        "relowered" (equal but for the header line and file names, which are the baker's and
        are not to be trusted, as an unproven mark is not).
    Raises:
        BadEntry: with a one-line reason, whatever is wrong (:class:`BadSignature` when only
            the signature fails).
    """
    try:  # the key covers every module the body imports (``modules``: {name: (path, text)})
        imports = resolve_imports(lf_breaks(wgsl), wgsl_path, from_mapping(modules))  # as lower() reads it
    except Exception as exc:
        raise BadEntry(f"this asset's imports do not resolve ({type(exc).__name__})") from None
    expected = variant_key(schema.text, wgsl, spec, imports)
    if expected != key:
        raise BadEntry("the key does not derive from this asset's text and spec")
    mac, entry = split_signed(value)
    opened = open_entry(key, entry, signed=False)  # a remote entry: proven below, its own way
    lowered = opened.lowered
    if lowered.spec != spec:
        raise BadEntry(f"an entry of another specialisation ({lowered.spec.label()})")
    if mac is not None and secret:  # an empty key proves nothing: anyone computes its HMAC (review helper 232)
        if not hmac.compare_digest(mac, hmac.new(secret, entry, hashlib.sha256).digest()):
            raise BadSignature("the signature does not hold under this studio's secret (forged, or another secret)")
        return opened, "signed"
    try:
        reference = lower(schema, wgsl, spec, wgsl_path=wgsl_path, modules=modules)
    except Exception as exc:  # the client's own text does not lower: nothing can match it
        raise BadEntry(f"this asset's text does not lower ({type(exc).__name__})") from None
    if not _same_lowering(lowered, reference):
        raise BadEntry("its lowered source or binding plan differs from this asset's own lowering (forged or foreign)")
    # The client's own lowering is what is served and kept: the entry's header line and file
    # names (the baker's paths) are not compared, and a forged one (a NUL in the header, a
    # files field of another type) would otherwise be served, and signed locally, for good.
    return Entry(reference, False), "relowered"
