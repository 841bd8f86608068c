"""A device lost on another thread at a random moment while frames run (what a GPU reset
does) never aborts the process and never lets an exception out of ``engine.frame()``; the
next ``get_context()`` hands a fresh device. ``RUNS_PER_PROCESS`` runs in each of
``PROCESSES`` subprocesses (an abort is exit 134 from a wgpu-native panic: a subprocess is
the only place it can be counted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
PROCESSES = 6
RUNS_PER_PROCESS = 10  # 60 runs in all


def _spawn(seed: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.join(HERE, "random_loss_script.py"), str(seed), str(RUNS_PER_PROCESS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


@pytest.mark.gpu
def test_random_device_loss_while_frames_run_never_aborts_or_escapes_frame():
    aborted, escaped, stale, runs, notes = [], [], 0, 0, []
    # Two at a time: the machine has two cores, and a loss must be survived under load too.
    seeds = list(range(1, PROCESSES + 1))
    while seeds:
        batch = [(_spawn(s), s) for s in seeds[:2]]
        seeds = seeds[2:]
        for proc, seed in batch:
            try:
                out, err = proc.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                aborted.append((seed, "hung"))
                continue
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            done = [r for r in lines if "run" in r]
            runs += len(done)
            escaped += [(seed, r["run"], r["escaped"]) for r in done if r["escaped"]]
            stale += sum(not r["new_context"] for r in done)
            if proc.returncode != 0:
                aborted.append((seed, proc.returncode, err.strip().splitlines()[-3:]))
    figure = f"{runs} runs, {len(aborted)} aborted processes, {len(escaped)} runs with an escaped exception, {stale} stale contexts"
    print(figure)
    assert not aborted, f"{figure}: {aborted}"
    assert not escaped, f"{figure}: {escaped[:5]}"
    assert stale == 0, figure
    assert runs == PROCESSES * RUNS_PER_PROCESS, figure
