#!/usr/bin/env python3
"""Run the benchmark suite (same as `engine-plugin bench`): python tools/bench/run.py [cases] [--json PATH]."""

import sys

from engine_plugin.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
