"""Ctrl-C while abi.read waits: a SIGALRM handler raising KeyboardInterrupt (SIGINT's default
handler, at a chosen moment) fires 0.1-0.4 ms into each of many one-shot reads on the main
thread. Prints one line for each KeyboardInterrupt that cffi swallowed inside a map callback
(the user's Ctrl-C lost; the map then may never settle), then "done READS INTERRUPTED"."""

import random
import signal
import sys

import numpy as np

from engine_plugin import abi
from engine_plugin.bench.axpy import AXPY_WGSL, AXPY_YAML


def main(reads: int) -> None:
    real_hook = sys.unraisablehook

    def hook(unraisable) -> None:
        if unraisable.exc_type is KeyboardInterrupt:
            print(f"swallowed: {unraisable.err_msg}", flush=True)
        real_hook(unraisable)

    sys.unraisablehook = hook

    def on_alarm(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, on_alarm)
    axpy = abi.program(key="ctrlc/axpy", schema=abi.parse(AXPY_YAML, "ctrlc/axpy/bindings.yaml"), wgsl=AXPY_WGSL).variant()
    xs = np.arange(1024, dtype=np.float32)
    abi.read(axpy.run(1024, inputs={"x": xs}, params={"a": 2.0}).outputs["y"])
    rng = random.Random(7)
    interrupted = 0
    for k in range(reads):
        out = axpy.run(1024, inputs={"x": xs + k}, params={"a": 2.0}).outputs["y"]
        try:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(100e-6, 400e-6))
            got = abi.read(out)
            signal.setitimer(signal.ITIMER_REAL, 0)
            assert np.array_equal(got, 2.0 * (xs + k) + 1.0), "a wrong number after interrupts"
        except KeyboardInterrupt:
            signal.setitimer(signal.ITIMER_REAL, 0)
            interrupted += 1
    print(f"done {reads} {interrupted}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
