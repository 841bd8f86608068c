"""Every Python snippet and every runnable command of the README, as written, from a checkout."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(REPO, "README.md")

pytestmark = pytest.mark.gpu


def _blocks(lang: str) -> list[str]:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def _inline_commands() -> list[str]:
    """``engine-plugin ...`` commands in backticks with concrete arguments (placeholders such as
    ``ASSETS``, ``[--json]``, ``a|b`` or ``...`` mark a synopsis, not a command)."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"`(engine-plugin [^`]+)`", text)
    return [c for c in found if not re.search(r"(^|\s)[A-Z]{2,}\b(?!=)|\[|\||\.\.\.", c)]


# The engine loop runs "while True": it stops here by the third frame (the snippet itself is run as written).
_STOP_AFTER_FRAMES = """
import engine_plugin.engine.engine as _e
_frame = _e.Engine.frame
_count = [0]
class _Done(Exception):
    pass
def _counted(self):
    _count[0] += 1
    if _count[0] > 3:
        raise _Done()
    return _frame(self)
_e.Engine.frame = _counted
"""


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_each_python_snippet_runs_as_written_from_the_checkout(index, tmp_path):
    snippet = _blocks("python")[index]
    runner = "import sys\nsnippet = sys.stdin.read()\n"
    if "while True:" in snippet:
        runner += (
            _STOP_AFTER_FRAMES
            + "try:\n    exec(compile(snippet, 'README', 'exec'), {'__name__': '__main__'})\nexcept _Done:\n    print('stopped after 3 frames')\n"
        )
    else:
        runner += "exec(compile(snippet, 'README', 'exec'), {'__name__': '__main__'})\n"
    done = subprocess.run([sys.executable, "-c", runner], input=snippet, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"snippet {index} failed:\n{snippet}\n--- stderr\n{done.stderr}"
    if "while True:" in snippet:
        assert "stopped after 3 frames" in done.stdout


def test_the_readme_has_the_snippets_and_commands_this_test_runs():
    assert len(_blocks("python")) == 2 and _blocks("sh") and _inline_commands()


@pytest.mark.parametrize("command", _inline_commands())
def test_each_concrete_cli_command_of_the_readme_runs(command, tmp_path):
    argv = shlex.split(command)
    done = subprocess.run([sys.executable, "-m", "engine_plugin", *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stderr}"


def test_make_run_recipe_runs_with_small_arguments(tmp_path):
    """The README's first command: ``make run``'s own recipe (from ``make -n``), with 5 frames
    and the outputs in a temporary folder (``make test`` is the suite itself: not run here)."""
    dry = subprocess.run(["make", "-n", "-s", "run"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    lines = [ln for ln in dry.stdout.splitlines() if "engine-plugin " in ln]
    assert [ln.split()[1] for ln in lines] == ["bake", "demo"], dry.stdout
    for line in lines:
        argv = shlex.split(line)
        argv = [a.replace("cache/", str(tmp_path / "cache") + "/") if a.startswith("cache/") else a for a in argv]
        argv = [str(tmp_path / "cache") if a == "cache" else a for a in argv]
        argv = [str(tmp_path / "out" / "demo.png") if a == "out/demo.png" else a for a in argv]
        argv = ["5" if prev == "--frames" else a for prev, a in zip([""] + argv, argv)]
        exe = os.path.join(os.path.dirname(sys.executable), "engine-plugin")
        done = subprocess.run([exe, *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=300, env=dict(os.environ, DISPLAY=""))
        assert done.returncode == 0, f"{line}\n{done.stderr}"
    assert (tmp_path / "out" / "demo.png").stat().st_size > 1000
    assert (tmp_path / "cache" / "bake-report.json").exists()
