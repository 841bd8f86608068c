"""The demo window's keys: one table, shown in the overlay, and the dispatch from key events.

Keys arrive as rendercanvas ``key_down`` events (``event["key"]``: ``"o"``, ``" "``, ``"F5"``,
``"Escape"``...). :func:`action_for` maps an event to an action name; the window performs it
(:class:`~engine_plugin.demo.window` owns the canvas, the overlay and the screenshot).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KEYS", "KeyBinding", "action_for", "help_lines"]


@dataclass(frozen=True)
class KeyBinding:
    """A key (as rendercanvas names it, lower case for letters), its label and its action."""

    key: str
    label: str
    action: str
    help: str
    short: str


KEYS: tuple[KeyBinding, ...] = (
    KeyBinding("o", "O", "toggle_overlay", "toggle the overlay", "overlay"),
    KeyBinding(" ", "Space", "pause", "pause / resume", "pause"),
    KeyBinding("n", "N", "step", "step one frame (paused)", "step"),
    KeyBinding("r", "R", "reset", "reset the world", "reset"),
    KeyBinding("F5", "F5", "reload", "reload every asset", "reload"),
    KeyBinding("F12", "F12", "screenshot", "save a screenshot", "screenshot"),
    KeyBinding("escape", "Esc", "quit", "quit", "quit"),
)

_BY_KEY = {b.key: b.action for b in KEYS}


def action_for(event: dict) -> str | None:
    """The action a ``key_down`` event asks for, or None. Letters match in either case."""
    key = str(event.get("key", ""))
    return _BY_KEY.get(key) or _BY_KEY.get(key.lower())


def help_lines(per_line: int = 4) -> list[str]:
    """The key table as a few short lines for the overlay (``"O overlay  Space pause ..."``)."""
    items = [f"{b.label} {b.short}" for b in KEYS]
    return ["  ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
