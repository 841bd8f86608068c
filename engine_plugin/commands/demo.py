"""``engine-plugin demo``: the live-edit demo, in a window when one can open, else headless."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .contract import EXIT_OK, Reporter, UsageError, check_output_file, folder_arg, sigterm_interrupts, whole_number_arg

__all__ = ["add_parser", "cmd_demo"]


def cmd_demo(args: argparse.Namespace, rep: Reporter) -> int:
    from ..extras import require

    require("rich", "the demo's frame statistics", extra="demo")  # [demo] brings rich too
    from ..demo.game import HeatDemo, demo_assets

    assets = args.assets or demo_assets()
    if args.assets:
        _check_demo_assets(args.assets)

    def make(**kw: Any) -> HeatDemo:
        return HeatDemo(assets, args.cache, watch=True, **kw)

    if not args.headless:
        from ..demo.window import display_problem

        problem = display_problem()
        if problem is None:
            from ..demo.window import run_window

            shown = run_window(make, frames=args.frames, screenshots=args.screenshots)
            rep.say(f"demo: window closed after {shown} frames")
            return EXIT_OK
        if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
            # A display was asked for and cannot be had: say so once, then run headless.
            rep.note(f"{problem}; running headless")
    snapshot = args.snapshot or None
    for flag, target in (("--snapshot", snapshot), ("--log", args.log)):
        if target:
            check_output_file(target, flag)  # before the frames run, not after
    if snapshot:
        require("PIL", "the demo's PNG snapshot (or pass --snapshot '')")
        # Checked before the frames run: a name Pillow cannot save (no extension, .txt, .jpg
        # of RGBA) failed after every frame, as 'engine_plugin bug' (review helper 171).
        if not snapshot.lower().endswith(".png"):
            raise UsageError(f"--snapshot {snapshot!r}: the snapshot is a PNG; name it NAME.png (or pass --snapshot '' for none)")
        folder = os.path.dirname(os.path.abspath(snapshot))
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--snapshot {snapshot!r}: cannot make {folder} ({exc.strerror or exc})") from None
    from ..demo.headless import OutputFileError, run_headless

    demo = make()
    try:
        # Headless, SIGTERM stops it as Ctrl-C does: the figures log written whole, exit 143.
        # Not in the window: rendercanvas's loop runs frames as asyncio tasks and handles the
        # signals it knows (an interrupt raised there printed a task's traceback, review helper 201).
        with sigterm_interrupts(), open(os.devnull, "w") as devnull:
            run_headless(demo, args.frames or 300, snapshot, out=devnull if rep.quiet else None, log=args.log or None, log_every=args.log_every)
    except OutputFileError as exc:  # a full disk, a folder /proc refuses: the environment's (review helpers 128, 132)
        raise UsageError(str(exc)) from None
    finally:
        demo.close()
    where = f"snapshot {os.path.abspath(snapshot)}; " if snapshot else ""
    if args.log:
        where += f"figures log {os.path.abspath(args.log)}; "
    # A cache that could not be made was named as if it held the variants (review helper 190).
    cache = "variant cache disabled" if demo.library.cache_error is not None else f"variant cache {os.path.abspath(args.cache)}"
    rep.say(f"demo: {where}{cache}")
    return EXIT_OK


def _check_demo_assets(folder: str) -> None:
    """``--assets`` names a folder holding the demo's kernels (a usage error, exit 2, when
    it does not: a mistyped path is not a broken shader, exit 1)."""
    from ..demo.products import PRODUCTS

    if not os.path.isdir(folder):
        raise UsageError(f"--assets {folder}: {'not a folder' if os.path.exists(folder) else 'no such folder'}")
    missing = [name for name in PRODUCTS if not os.path.isdir(os.path.join(folder, f"{name}.computeShader"))]
    if len(missing) == len(PRODUCTS):
        raise UsageError(f"--assets {folder} holds none of the demo's kernels ({', '.join(f'{n}.computeShader' for n in PRODUCTS)}); pass a copy of them")
    if missing:
        raise UsageError(f"--assets {folder} lacks the demo's {', '.join(f'{n}.computeShader' for n in missing)}")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="run the live-edit demo (a window when a display can be opened, else headless)",
        description="The live-edit demo. With a display it opens a glfw window with an overlay of timings, reloads and errors "
        "(O overlay, Space pause, N step, R reset, F5 reload every asset, F12 screenshot, Esc quit); "
        "without one, or when the display cannot be opened (said on one line), it runs headless frames and writes a PNG snapshot "
        "and a JSON-lines log of the overlay's figures.",
    )
    p.add_argument("--frames", type=whole_number_arg(1), default=None, help="frames to run (default: until Esc; 300 headless)")
    p.add_argument("--headless", action="store_true", help="no window, even with a display")
    p.add_argument(
        "--snapshot", default="out/demo.png", help="PNG written at the end of a headless run (Ctrl-C: of its last frame; its folder is created; '' for none)"
    )
    p.add_argument("--log", default="out/demo.jsonl", metavar="FILE", help="headless: JSON-lines log of the overlay's figures ('' for none)")
    p.add_argument("--log-every", type=whole_number_arg(1), default=10, metavar="N", help="headless: one log line every N frames (default 10)")
    p.add_argument("--screenshots", default="out", metavar="DIR", help="window: the folder the screenshot key (F12) writes PNGs to")
    p.add_argument("--assets", default=None, metavar="DIR", help="the demo's kernels (default: the packaged ones; pass a copy to edit them live)")
    p.add_argument("--cache", default="cache", type=folder_arg, metavar="DIR", help="the variant cache folder (default: cache)")
    p.set_defaults(func=cmd_demo)
